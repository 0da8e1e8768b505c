package ec2cloud

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// lossyTransport sends every request, but loses the replies to CreateVolume calls under one ClientToken while
// dropping is set: the volume is made, the caller never hears of it.
type lossyTransport struct {
	token    string
	dropping atomic.Bool
}

var errReplyLost = errors.New("reply lost")

func (l *lossyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	_ = req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(body))
	resp, err := http.DefaultTransport.RoundTrip(req)
	form, _ := url.ParseQuery(string(body))
	if err == nil && l.dropping.Load() && form.Get("Action") == "CreateVolume" && form.Get("ClientToken") == l.token {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return nil, errReplyLost
	}
	return resp, err
}

// TestReusedNameLostReply: a name is reused after its disk was deleted, so CreateDisk steps to the next
// ClientToken, and the reply that made the new disk is lost. By the retry the old disk is gone. The retry must get
// the same new disk back (the old disk's token still answers it, deleted), not make a third one and leak the
// second.
func TestReusedNameLostReply(t *testing.T) {
	const name = "pvc-reused-name"
	// A CA bundle from the environment needs the SDK's own client; the plain one here speaks HTTP only.
	t.Setenv("AWS_CA_BUNDLE", "")
	lossy := &lossyTransport{}
	e := newTestEnv(t, fakecloudtest.Options{Durations: state.Durations{VolumeDelete: 300 * time.Millisecond}},
		func(o *Options) { o.HTTPClient = &http.Client{Transport: lossy} })
	ctx := testCtx(t)

	old := e.mustCreate(t, name, cloud.DiskOptions{})
	if err := e.DeleteDisk(ctx, old.ID); err != nil {
		t.Fatal(err)
	}
	// While the old disk is deleting its token answers it, so the create steps to the next token, whose reply
	// is lost.
	lossy.token = clientToken(name, old.ID)
	lossy.dropping.Store(true)
	if d, err := e.CreateDisk(ctx, name, cloud.DiskOptions{Zone: zoneA, SizeGiB: 1}); err == nil {
		t.Fatalf("CreateDisk whose reply was lost returned %s", d.ID)
	}
	lossy.dropping.Store(false)
	fakecloudtest.WaitFor(t, 10*time.Second, "old disk gone", func(ctx context.Context) (bool, error) {
		_, err := e.raw(t).DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{old.ID}})
		return errorCode(err) == "InvalidVolume.NotFound", nil
	})
	vols, err := e.raw(t).DescribeVolumes(ctx, &ec2.DescribeVolumesInput{})
	if err != nil || len(vols.Volumes) != 1 {
		t.Fatalf("after the lost reply: %v, %v; want the one disk it made", vols, err)
	}
	made := aws.ToString(vols.Volumes[0].VolumeId)

	again, err := e.CreateDisk(ctx, name, cloud.DiskOptions{Zone: zoneA, SizeGiB: 1})
	if err != nil {
		t.Fatalf("CreateDisk retried: %v", err)
	}
	if again.ID != made {
		t.Errorf("the retry made %s; want %s, the disk the lost reply made", again.ID, made)
	}
	if n := e.volumeCount(t); n != 1 {
		t.Errorf("%d disks in the cloud after the retry, want 1: a disk leaked", n)
	}
}

// TestNameReusedManyTimes: a name created and deleted again and again within the token retention steps once
// more each time, and every creation gets a disk of its own.
func TestNameReusedManyTimes(t *testing.T) {
	const name = "pvc-reused-often"
	e := newTestEnv(t, fakecloudtest.Options{})
	ctx := testCtx(t)
	seen := map[string]bool{}
	for i := range 6 {
		d, err := e.CreateDisk(ctx, name, cloud.DiskOptions{Zone: zoneA, SizeGiB: 1})
		if err != nil {
			t.Fatalf("creation %d: %v", i+1, err)
		}
		if seen[d.ID] {
			t.Fatalf("creation %d got %s again", i+1, d.ID)
		}
		seen[d.ID] = true
		if err := e.DeleteDisk(ctx, d.ID); err != nil {
			t.Fatal(err)
		}
	}
}
