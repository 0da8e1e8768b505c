package cloud

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// instanceCloud answers GetInstance from a map; the rest of Cloud is not used.
type instanceCloud struct {
	Cloud
	states map[string]string
}

func (c instanceCloud) GetInstance(_ context.Context, id string) (*Instance, error) {
	st, ok := c.states[id]
	if !ok {
		return nil, &Error{Op: "get instance", Kinds: []error{ErrNotFound}}
	}
	return &Instance{ID: id, State: st}, nil
}

func TestAttachedElsewhere(t *testing.T) {
	c := instanceCloud{states: map[string]string{"i-run": InstanceRunning, "i-stop": InstanceStopped,
		"i-stopping": InstanceStopping, "i-end": InstanceShuttingDown, "i-gone": InstanceTerminated}}
	cases := []struct {
		instance, attachment string
		wantState            string
		wantText             []string
	}{
		{"i-run", AttachmentAttached, InstanceRunning, []string{"i-run", "which is running"}},
		{"i-stop", AttachmentAttached, InstanceStopped, []string{"i-stop", "which is stopped", "until it is detached there"}},
		{"i-stopping", AttachmentAttached, InstanceStopping, []string{"which is stopping", "until it is detached there"}},
		{"i-end", AttachmentDetaching, InstanceShuttingDown, []string{"attachment detaching", "which is shutting-down", "as the instance ends"}},
		{"i-gone", AttachmentAttached, InstanceTerminated, []string{"which is terminated", "as the instance ends"}},
		{"i-unknown", AttachmentAttached, "", []string{"instance state unknown"}},
	}
	for _, tc := range cases {
		t.Run(tc.instance, func(t *testing.T) {
			err := fmt.Errorf("publish: %w", AttachedElsewhere(context.Background(), c,
				Attachment{VolumeID: "vol-1", InstanceID: tc.instance, State: tc.attachment}))
			if !errors.Is(err, ErrInUse) || errors.Is(err, ErrNotFound) {
				t.Errorf("%v: want ErrInUse only", err)
			}
			var ae *AttachedElsewhereError
			if !errors.As(err, &ae) || ae.InstanceID != tc.instance || ae.InstanceState != tc.wantState || ae.VolumeID != "vol-1" {
				t.Fatalf("error = %#v", ae)
			}
			for _, w := range tc.wantText {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
		})
	}
}

func TestInstanceStates(t *testing.T) {
	for _, tc := range []struct {
		state         string
		gone, stopped bool
	}{
		{InstancePending, false, false}, {InstanceRunning, false, false}, {InstanceStopping, false, true},
		{InstanceStopped, false, true}, {InstanceShuttingDown, true, false}, {InstanceTerminated, true, false},
	} {
		if IsInstanceGone(tc.state) != tc.gone || IsInstanceStopped(tc.state) != tc.stopped {
			t.Errorf("%s: gone %v stopped %v, want %v %v", tc.state, IsInstanceGone(tc.state), IsInstanceStopped(tc.state), tc.gone, tc.stopped)
		}
	}
}
