package driver

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestInFlightHoldLastsUntilRelease: a hold lasts as long as its operation runs, whatever the RPC's
// deadline: a handler still working past it (a mkfs) keeps its keys, and a duplicate is Aborted until it
// returns. Other keys are free meanwhile, and release is idempotent.
func TestInFlightHoldLastsUntilRelease(t *testing.T) {
	now := time.Unix(1000, 0)
	f := newInFlight(func() time.Time { return now })
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(time.Minute))
	defer cancel()
	release, err := f.hold(ctx, "volume", "vol-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.hold(context.Background(), "volume", "vol-1"); status.Code(err) != codes.Aborted {
		t.Fatalf("duplicate: %v, want Aborted", err)
	}
	other, err := f.hold(context.Background(), "volume", "vol-2")
	if err != nil {
		t.Fatalf("other key: %v", err)
	}
	other()
	// Past the holder's deadline, its handler still runs: the key stays held, and the answer says for how long.
	now = now.Add(2 * time.Minute)
	_, err = f.hold(context.Background(), "volume", "vol-1")
	if status.Code(err) != codes.Aborted || status.Convert(err).Message() != `an operation on volume "vol-1" is already in progress (for 2m0s)` {
		t.Fatalf("past the holder's deadline: %v, want Aborted (for 2m0s)", err)
	}
	release()
	release()
	again, err := f.hold(context.Background(), "volume", "vol-1")
	if err != nil {
		t.Fatalf("after the holder returned: %v", err)
	}
	again()
}
