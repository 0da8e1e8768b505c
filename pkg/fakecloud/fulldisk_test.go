package fakecloud_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

// smallExt4 mounts a fresh ext4 filesystem of sizeMiB on a directory of its own (a loop mount that umount
// releases) and returns the mount point; it is unmounted and removed when the test ends, also on failure.
func smallExt4(t *testing.T, sizeMiB int) string {
	t.Helper()
	var notRoot error
	if os.Geteuid() != 0 {
		notRoot = errors.New("not root")
	}
	testutil.SkipUnless(t, notRoot, "mounting a small filesystem needs root")
	testutil.RequireTools(t, "mkfs.ext4", "mount", "umount")
	base := t.TempDir()
	img, mnt := filepath.Join(base, "fs.img"), filepath.Join(base, "mnt")
	if err := os.Mkdir(mnt, 0o750); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Truncate(int64(sizeMiB)<<20), f.Close()); err != nil {
		t.Fatal(err)
	}
	// 4 KiB blocks give ext4's usual 16 TiB file size limit; no blocks reserved for root, who runs the test.
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-b", "4096", "-m", "0", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}
	t.Cleanup(func() { testutil.UnmountUnder(t, mnt) })
	return mnt
}

// fill writes non-zero data to a file until the filesystem is full, and returns the file to free it.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	_, _ = rand.Read(buf)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	// Smaller writes take the last blocks too.
	for _, err := f.Write(buf[:4096]); err == nil; _, err = f.Write(buf[:4096]) {
	}
	_ = f.Sync()
	return path
}

// TestFullDataDirectory runs creates, attaches and snapshots on a data directory whose filesystem is full,
// frees space, restarts, and checks that exactly what was acknowledged survived, with no file left behind for
// anything else and a consistent database.
func TestFullDataDirectory(t *testing.T) {
	dataDir := filepath.Join(smallExt4(t, 48), "data")
	env := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dataDir})
	c := env.EC2(t)
	ctx := context.Background()
	inst := env.Instances[zoneA]

	// A volume past ext4's largest file is refused with the capacity code, naming the cause.
	_, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA), Size: aws.Int32(20000), VolumeType: types.VolumeTypeGp3})
	if codeOf(err) != "InsufficientVolumeCapacity" || !strings.Contains(messageOf(err), "largest file") {
		t.Errorf("CreateVolume of 20000 GiB on ext4: %v, want InsufficientVolumeCapacity naming the file size limit", err)
	}

	// Growing past it fails the modification and keeps the volume's size.
	grown := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
	if _, err := c.ModifyVolume(ctx, &ec2.ModifyVolumeInput{VolumeId: &grown, VolumeType: types.VolumeTypeGp3, Size: aws.Int32(20000)}); err != nil {
		t.Fatal(err)
	}
	fakecloudtest.WaitFor(t, 10*time.Second, "modification failed", func(ctx context.Context) (bool, error) {
		out, err := c.DescribeVolumesModifications(ctx, &ec2.DescribeVolumesModificationsInput{VolumeIds: []string{grown}})
		return err == nil && out.VolumesModifications[0].ModificationState == types.VolumeModificationStateFailed &&
			strings.Contains(aws.ToString(out.VolumesModifications[0].StatusMessage), "largest file"), err
	})
	if v := describeVolume(t, c, grown); aws.ToInt32(v.Size) != 1 {
		t.Errorf("volume whose growth failed has size %d, want 1", aws.ToInt32(v.Size))
	}

	ackVolumes, ackSnapshots := map[string]bool{grown: true}, map[string]bool{}
	ackAttached := map[string]string{} // volume → device
	// Volumes holding data, so that snapshots need space.
	var withData []string
	for i := range 3 {
		id := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
		ackVolumes[id] = true
		withData = append(withData, id)
		data := make([]byte, 2<<20)
		_, _ = rand.Read(data)
		if err := os.WriteFile(env.Server.Backend.VolumeFile(id), data, 0); err != nil && i == 0 {
			t.Fatalf("write volume data: %v", err)
		}
	}
	filler := fill(t, dataDir)

	var refused, capacity int
	for i := range 50 {
		out, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA), Size: aws.Int32(1)})
		if err != nil {
			refused++
			if codeOf(err) == "InsufficientVolumeCapacity" {
				capacity++
			}
			continue
		}
		id := aws.ToString(out.VolumeId)
		ackVolumes[id] = true
		if i%5 == 1 {
			// An empty volume's snapshot needs no data blocks, only its record.
			if out, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: aws.String(id)}); err == nil {
				ackSnapshots[aws.ToString(out.SnapshotId)] = true
			}
		}
		if i%5 == 0 {
			dev := fmt.Sprintf("/dev/xvd%c%c", 'b'+i/26, 'a'+i%26)
			if _, err := c.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: &id, InstanceId: &inst, Device: &dev}); err == nil {
				ackAttached[id] = dev
			}
		}
	}
	// A snapshot is answered before its copy runs: refused only when its record cannot be kept. Its copy then
	// fails for want of space, and so does recording that, so it stays pending (never a state that would not
	// survive a restart) until space is freed.
	snapCodes := map[string]int{}
	for _, id := range withData {
		out, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: aws.String(id)})
		if err == nil {
			ackSnapshots[aws.ToString(out.SnapshotId)] = true
			continue
		}
		snapCodes[codeOf(err)]++
		if code := codeOf(err); code != "InsufficientVolumeCapacity" {
			t.Errorf("CreateSnapshot on a full disk: %v, want InsufficientVolumeCapacity", err)
		}
	}
	t.Logf("on the full disk: %d creates refused (%d with InsufficientVolumeCapacity), %d volumes, %d attachments, %d snapshots acknowledged; snapshots of volumes holding data refused with %v",
		refused, capacity, len(ackVolumes), len(ackAttached), len(ackSnapshots), snapCodes)
	if refused == 0 {
		t.Errorf("no create was refused on a full filesystem: the test did not exercise failing commits")
	}
	if capacity != refused {
		t.Errorf("%d of %d refusals on a full filesystem were not InsufficientVolumeCapacity", refused-capacity, refused)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	env.Close()
	checkBolt(t, filepath.Join(dataDir, "state.db"))

	env = fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dataDir})
	c = env.EC2(t)
	vols, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{})
	if err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for _, v := range vols.Volumes {
		id := aws.ToString(v.VolumeId)
		present[id] = true
		if !ackVolumes[id] {
			t.Errorf("volume %s is present but was never acknowledged", id)
		}
		if dev, ok := ackAttached[id]; ok && (len(v.Attachments) != 1 || aws.ToString(v.Attachments[0].Device) != dev) {
			t.Errorf("acknowledged attachment of %s at %s lost: %+v", id, dev, v.Attachments)
		}
	}
	for id := range ackVolumes {
		if !present[id] {
			t.Errorf("acknowledged volume %s is gone after the restart", id)
		}
	}
	// Copies cut short by the restart run again; a client waits for them as for any pending snapshot.
	var snaps *ec2.DescribeSnapshotsOutput
	fakecloudtest.WaitFor(t, 20*time.Second, "snapshots settled", func(ctx context.Context) (bool, error) {
		snaps, err = c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{OwnerIds: []string{"self"}})
		if err != nil {
			return false, err
		}
		for _, sn := range snaps.Snapshots {
			if sn.State == types.SnapshotStatePending {
				return false, nil
			}
		}
		return true, nil
	})
	presentSnaps := map[string]bool{}
	for _, sn := range snaps.Snapshots {
		id := aws.ToString(sn.SnapshotId)
		presentSnaps[id] = true
		if _, err := os.Stat(filepath.Join(dataDir, "snapshots", id+".img")); sn.State == types.SnapshotStateCompleted && err != nil {
			t.Errorf("completed snapshot %s has no file: %v", id, err)
		}
	}
	for id := range ackSnapshots {
		if !presentSnaps[id] {
			t.Errorf("acknowledged snapshot %s is gone after the restart", id)
		}
	}
	for id := range presentSnaps {
		if !ackSnapshots[id] {
			t.Errorf("snapshot %s is present but was never acknowledged", id)
		}
	}
	orphans := orphanFiles(t, filepath.Join(dataDir, "volumes"), present)
	orphans = append(orphans, orphanFiles(t, filepath.Join(dataDir, "snapshots"), presentSnaps)...)
	if len(orphans) > 0 {
		t.Errorf("files without a resource: %v", orphans)
	}
	t.Logf("after the restart: %d of %d acknowledged volumes and %d of %d acknowledged snapshots present, %d orphan files",
		len(present), len(ackVolumes), len(presentSnaps), len(ackSnapshots), len(orphans))
}

// orphanFiles lists files in dir, temporary ones included, that belong to no resource in known.
func orphanFiles(t *testing.T, dir string, known map[string]bool) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".img"); !ok || !known[id] {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out
}

// checkBolt runs bbolt's own consistency check on a closed database.
func checkBolt(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		var errs []error
		for e := range tx.Check() {
			errs = append(errs, e)
		}
		return errors.Join(errs...)
	})
	if err != nil {
		t.Errorf("bbolt check: %v", err)
	}
}

// TestCommitOutOfSpace: when the state store's commit finds the filesystem full, the client is told so with
// EC2's capacity code (which the driver answers ResourceExhausted, once), not an InternalError it would retry
// for ever, and nothing changed.
func TestCommitOutOfSpace(t *testing.T) {
	dataDir := filepath.Join(smallExt4(t, 48), "data")
	env := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dataDir})
	c := env.EC2(t)
	ctx := context.Background()
	var vols []string
	for range 40 {
		vols = append(vols, availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)}))
	}
	filler := fill(t, dataDir)
	t.Cleanup(func() { _ = os.Remove(filler) })

	// Tags only grow the store (about 20 KiB a volume here): no file is made, so a refusal comes from the commit.
	var tags []types.Tag
	for k := range 50 {
		tags = append(tags, types.Tag{Key: aws.String(fmt.Sprintf("k%02d-%s", k, strings.Repeat("k", 100))), Value: aws.String(strings.Repeat("v", 256))})
	}
	for _, vol := range vols {
		_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{vol}, Tags: tags})
		if err == nil {
			continue
		}
		if codeOf(err) != "InsufficientVolumeCapacity" || !strings.Contains(messageOf(err), "filesystem is full") {
			t.Fatalf("CreateTags whose commit found the disk full: %v, want InsufficientVolumeCapacity naming the full filesystem", err)
		}
		if after := describeVolume(t, c, vol).Tags; len(after) != 0 {
			t.Errorf("refused CreateTags left %d tags on the volume", len(after))
		}
		return
	}
	t.Fatal("no commit was refused on a full filesystem")
}

// TestSnapshotCopyOutOfSpace: a snapshot whose copy finds no room goes to state error with a message saying so,
// as EBS snapshots can, and leaves no file behind.
func TestSnapshotCopyOutOfSpace(t *testing.T) {
	dataDir := filepath.Join(smallExt4(t, 48), "data")
	env := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dataDir})
	c := env.EC2(t)
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
	fillRandom(t, env, vol, 0, 16<<20)
	// Full but for 2 MiB: room for the store's commits, not for the copy.
	filler := fill(t, dataDir)
	t.Cleanup(func() { _ = os.Remove(filler) })
	st, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, st.Size()-2<<20); err != nil {
		t.Fatal(err)
	}

	out, err := c.CreateSnapshot(context.Background(), &ec2.CreateSnapshotInput{VolumeId: &vol})
	if err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	sid := aws.ToString(out.SnapshotId)
	sn := waitSnapshot(t, c, sid, types.SnapshotStateError)
	if !strings.Contains(aws.ToString(sn.StateMessage), "filesystem is full") {
		t.Errorf("snapshot in error says %q, want the full filesystem named", aws.ToString(sn.StateMessage))
	}
	if files := append(orphanFiles(t, filepath.Join(dataDir, "snapshots"), nil), temporaryFiles(t, dataDir)...); len(files) > 0 {
		t.Errorf("files left by the failed copy: %v", files)
	}
	// The volume is free again: its deletion does not wait for a copy that ended.
	if _, err := c.DeleteVolume(context.Background(), &ec2.DeleteVolumeInput{VolumeId: &vol}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, vol)
}

// TestLargestFileOnExt4: ext4 with 4 KiB blocks holds files up to 16 TiB − 4 KiB, so a legal 16,384 GiB gp3
// volume cannot be made on it: fakecloud finds the limit at start and refuses such a volume with
// InsufficientVolumeCapacity naming the cause.
func TestLargestFileOnExt4(t *testing.T) {
	dataDir := filepath.Join(smallExt4(t, 48), "data")
	env := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dataDir})
	fs, err := blockdev.Probe(dataDir)
	if err != nil || fs.LargestFile != 16<<40-4096 || !strings.Contains(fs.Type, "ext") {
		t.Errorf("Probe = %+v, %v; want ext4's largest file of 16 TiB - 4 KiB", fs, err)
	}
	_, err = env.EC2(t).CreateVolume(context.Background(), &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA),
		Size: aws.Int32(16384), VolumeType: types.VolumeTypeGp3})
	if codeOf(err) != "InsufficientVolumeCapacity" || !strings.Contains(messageOf(err), "largest file") {
		t.Errorf("CreateVolume of 16384 GiB on ext4: %v, want InsufficientVolumeCapacity naming the file size limit", err)
	}
	if files := temporaryFiles(t, dataDir); len(files) > 0 {
		t.Errorf("temporary files left: %v", files)
	}
}
