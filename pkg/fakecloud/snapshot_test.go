package fakecloud_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

// fillRandom writes n random bytes into a volume's file at off and returns them.
func fillRandom(t *testing.T, env *fakecloudtest.Env, volumeID string, off int64, n int) []byte {
	t.Helper()
	data := make([]byte, n)
	_, _ = rand.Read(data)
	writeAt(t, env.Server.Backend.VolumeFile(volumeID), data, off)
	return data
}

// checkSnapshotFile checks that a snapshot's file has the volume's size and holds data at off.
func checkSnapshotFile(t *testing.T, dataDir, snapshotID string, sizeGiB int64, off int64, data []byte) {
	t.Helper()
	f, err := os.Open(filepath.Join(dataDir, "snapshots", snapshotID+".img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, off); err != nil || st.Size() != sizeGiB<<30 || !bytes.Equal(got, data) {
		t.Errorf("snapshot file: %d bytes (want %d), data at %d matches: %v (%v)", st.Size(), sizeGiB<<30, off, bytes.Equal(got, data), err)
	}
}

// temporaryFiles lists the hidden temporary files of copies under a data directory.
func temporaryFiles(t *testing.T, dataDir string) []string {
	t.Helper()
	var out []string
	for _, sub := range []string{"volumes", "snapshots"} {
		entries, err := os.ReadDir(filepath.Join(dataDir, sub))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				out = append(out, filepath.Join(sub, e.Name()))
			}
		}
	}
	return out
}

// TestCreateSnapshotAnswersBeforeTheCopy: CreateSnapshot of a big volume answers pending while its copy is held
// back, as EC2 answers at once; the snapshot stays pending (even past its configured duration) until the copy is
// done, the source volume's deletion waits for the copy, and the snapshot holds the volume's bytes.
func TestCreateSnapshotAnswersBeforeTheCopy(t *testing.T) {
	hooks := &hookedBackend{copies: newGate(t)}
	env := fakecloudtest.Start(t, fakecloudtest.Options{WrapBackend: hooks.wrap})
	c := env.EC2(t)
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(64)})
	const off = 40 << 30
	data := fillRandom(t, env, vol, off, 1<<20)

	// The copy cannot finish before the reply: it is held until the test lets it go.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &vol})
	if err != nil {
		t.Fatalf("CreateSnapshot while its copy is held: %v", err)
	}
	sid := aws.ToString(out.SnapshotId)
	if out.State != types.SnapshotStatePending || aws.ToInt32(out.VolumeSize) != 64 {
		t.Errorf("CreateSnapshot = %s, %d GiB; want pending, 64 GiB", out.State, aws.ToInt32(out.VolumeSize))
	}
	if got := hooks.copies.await(t); got != sid {
		t.Fatalf("copy of %s started, want %s", got, sid)
	}
	// Its duration (zero) has passed, but the copy has not ended.
	if sn := waitSnapshot(t, c, sid, types.SnapshotStatePending); aws.ToString(sn.Progress) == "100%" {
		t.Errorf("pending snapshot at %s", aws.ToString(sn.Progress))
	}
	if _, err := c.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: &vol}); err != nil {
		t.Fatalf("DeleteVolume while its snapshot copies: %v", err)
	}
	if v := describeVolume(t, c, vol); v.State != types.VolumeStateDeleting {
		t.Errorf("volume whose snapshot is copying is %s, want deleting (its file kept for the copy)", v.State)
	}

	hooks.copies.release()
	sn := waitSnapshot(t, c, sid, types.SnapshotStateCompleted)
	if aws.ToString(sn.Progress) != "100%" {
		t.Errorf("completed snapshot at %s", aws.ToString(sn.Progress))
	}
	checkSnapshotFile(t, env.DataDir, sid, 64, off, data)
	waitGone(t, c, vol)
}

// TestDeletePendingSnapshot: a snapshot may be deleted while its copy runs, as on EC2; the copy is abandoned,
// nothing is left on disk, and its volume is free again.
func TestDeletePendingSnapshot(t *testing.T) {
	hooks := &hookedBackend{copies: newGate(t)}
	env := fakecloudtest.Start(t, fakecloudtest.Options{WrapBackend: hooks.wrap})
	c := env.EC2(t)
	ctx := context.Background()
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
	fillRandom(t, env, vol, 0, 1<<20)
	out, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &vol})
	if err != nil {
		t.Fatal(err)
	}
	sid := aws.ToString(out.SnapshotId)
	hooks.copies.await(t)
	if _, err := c.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: &sid}); err != nil {
		t.Fatalf("DeleteSnapshot of a pending snapshot: %v", err)
	}
	if _, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{sid}}); codeOf(err) != "InvalidSnapshot.NotFound" {
		t.Errorf("deleted pending snapshot: %v, want InvalidSnapshot.NotFound", err)
	}
	hooks.copies.release()
	if _, err := c.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: &vol}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, vol)
	if files := append(orphanFiles(t, filepath.Join(env.DataDir, "snapshots"), nil), temporaryFiles(t, env.DataDir)...); len(files) > 0 {
		t.Errorf("files left by the abandoned snapshot: %v", files)
	}
}

// TestSnapshotCopyCutShortByRestart: a restart during the copy leaves neither a half-copied file nor a snapshot
// that claims to be complete; the copy runs again and the snapshot completes with the volume's bytes.
func TestSnapshotCopyCutShortByRestart(t *testing.T) {
	dir := t.TempDir()
	hooks := &hookedBackend{copies: newGate(t)}
	first := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dir, WrapBackend: hooks.wrap})
	c := first.EC2(t)
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(2)})
	data := fillRandom(t, first, vol, 1<<30, 1<<20)
	out, err := c.CreateSnapshot(context.Background(), &ec2.CreateSnapshotInput{VolumeId: &vol})
	if err != nil {
		t.Fatal(err)
	}
	sid := aws.ToString(out.SnapshotId)
	hooks.copies.await(t)
	first.Close()
	// What a crash in the middle of a copy leaves: its temporary file.
	partial := filepath.Join(dir, "snapshots", "."+sid+".img.4242.tmp")
	if err := os.WriteFile(partial, data[:4096], 0o600); err != nil {
		t.Fatal(err)
	}

	second := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dir})
	c = second.EC2(t)
	waitSnapshot(t, c, sid, types.SnapshotStateCompleted)
	checkSnapshotFile(t, dir, sid, 2, 1<<30, data)
	if files := temporaryFiles(t, dir); len(files) > 0 {
		t.Errorf("temporary files after the restart: %v", files)
	}
}
