package driver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskforge/diskforge/internal/hostclean"
	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
)

// nodeNSEnv marks the child process that runs TestNodeSafety inside a private mount namespace.
const nodeNSEnv = "DISKFORGE_NODE_SAFETY_NS"

// TestNodeSafety drives hostile and mistaken requests against the real node service on loop devices, and
// checks each answer's code and that nothing outside the volume's own paths changed: the namespace's whole
// mount table and the file tree around the volumes. It runs in a child process in a private mount namespace,
// so that the mount table is this test's alone (other tests mount concurrently on the host) and so that a
// regression mounting over "/" or "/etc" could not reach the host.
func TestNodeSafety(t *testing.T) {
	if os.Getenv(nodeNSEnv) != "" {
		t.Run("paths and mounts", runNodeSafety)
		t.Run("health", runNodeHealth)
		return
	}
	testutil.SkipUnless(t, blockdev.Available(), "node safety tests stage real loop devices: need root and /dev/loop-control")
	testutil.RequireTools(t, "unshare", "mkfs.ext4", "mount")
	tmp := t.TempDir()
	// Loop devices are global: whatever a crashed child left bound under its TMPDIR is released here.
	t.Cleanup(func() {
		if err := hostclean.ReleaseLoopsUnder(tmp); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", os.Args[0],
		"-test.run=^TestNodeSafety$", "-test.v", "-test.count=1", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), nodeNSEnv+"=1", "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "ok") {
			t.Log(l)
		}
	}
	if err != nil {
		t.Fatalf("node safety run in a private mount namespace failed: %v\n%s", err, out)
	}
}

// hostState is what a request may not change outside the volume's own paths.
type hostState struct {
	mounts map[string]string // mount point -> device, root, type, source, options
	files  map[string]string // path -> type, mode, size, content hash or link target
}

func snapshotHost(t *testing.T, h host, trees []string, listings []string) hostState {
	t.Helper()
	s := hostState{mounts: map[string]string{}, files: map[string]string{}}
	infos, err := h.mounts(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, mi := range infos {
		// Stacked mounts on one point are kept apart by their order.
		key := mi.Mountpoint
		for i := 1; s.mounts[key] != ""; i++ {
			key = fmt.Sprintf("%s#%d", mi.Mountpoint, i)
		}
		s.mounts[key] = fmt.Sprintf("%d:%d %s %s %s %s", mi.Major, mi.Minor, mi.Root, mi.FSType, mi.Source, mi.Options)
	}
	record := func(p string, d fs.DirEntry) {
		info, err := d.Info()
		if err != nil {
			return
		}
		desc := fmt.Sprintf("%s %o %d", info.Mode().Type(), info.Mode().Perm(), info.Size())
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		case info.Mode().IsRegular() && info.Size() < 1<<20:
			b, _ := os.ReadFile(p)
			sum := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(sum[:8])
		case info.IsDir():
			desc = fmt.Sprintf("%s %o", info.Mode().Type(), info.Mode().Perm()) // a directory's size varies
		}
		s.files[p] = desc
	}
	for _, root := range trees {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil {
				record(p, d)
			}
			return nil
		})
	}
	for _, dir := range listings {
		entries, _ := os.ReadDir(dir)
		for _, d := range entries {
			record(filepath.Join(dir, d.Name()), d)
		}
	}
	return s
}

// under reports whether p is one of paths or below one.
func under(p string, paths []string) bool {
	p, _, _ = strings.Cut(p, "#")
	for _, o := range paths {
		if p == o || strings.HasPrefix(p, o+"/") {
			return true
		}
	}
	return false
}

// changesOutside lists the differences between two states outside the paths own.
func changesOutside(before, after hostState, own []string) []string {
	var diffs []string
	compare := func(kind string, a, b map[string]string) {
		for k, v := range a {
			if under(k, own) {
				continue
			}
			if w, ok := b[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s %s gone (was %s)", kind, k, v))
			} else if w != v {
				diffs = append(diffs, fmt.Sprintf("%s %s changed: %s -> %s", kind, k, v, w))
			}
		}
		for k, v := range b {
			if _, ok := a[k]; !ok && !under(k, own) {
				diffs = append(diffs, fmt.Sprintf("%s %s appeared: %s", kind, k, v))
			}
		}
	}
	compare("mount", before.mounts, after.mounts)
	compare("file", before.files, after.files)
	slices.Sort(diffs)
	return diffs
}

// safetyCase is one request (or short sequence) and what it must answer. own lists the paths it may change:
// the volume's own paths. check, when set, asserts more after the call.
type safetyCase struct {
	name  string
	call  func() error
	want  codes.Code
	own   []string
	check func(t *testing.T)
}

// runSafetyCases runs the cases in order, each checked for its code, its check and that nothing changed
// outside its own paths between two snapshots.
func runSafetyCases(t *testing.T, cases []safetyCase, snap func() hostState) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := snap()
			err := tc.call()
			if got := status.Code(err); got != tc.want {
				t.Errorf("code %s (%v), want %s", got, err, tc.want)
			}
			if tc.check != nil {
				tc.check(t)
			}
			for _, d := range changesOutside(before, snap(), tc.own) {
				t.Errorf("changed outside the volume's paths: %s", d)
			}
		})
	}
}

func runNodeSafety(t *testing.T) {
	e := newNodeEnv(t, NodeOptions{})
	ctx := context.Background()
	w := e.path("world")
	foreign := filepath.Join(w, "foreign")
	for _, d := range []string{w, filepath.Join(w, "emptydir"), filepath.Join(w, "etc"), foreign} {
		must(t, os.Mkdir(d, 0o755))
	}
	writeFile(t, filepath.Join(w, "file.txt"), "data that is not the volume's")
	writeFile(t, filepath.Join(w, "etc", "passwd"), "root:x:0:0")
	must(t, os.Symlink(filepath.Join(w, "etc"), filepath.Join(w, "link")))
	must(t, unix.Mount("tmpfs", foreign, "tmpfs", 0, "size=1m"))
	writeFile(t, filepath.Join(foreign, "keep"), "a foreign filesystem")

	ext4, blk := mountCap("ext4", rwo), blockCap(rwo)
	// A: ext4, staged and published. B: attached, never staged. K: block, staged and published.
	idA, _ := e.volume(ext4Size, nil)
	idB, _ := e.volume(ext4Size, nil)
	idK, _ := e.volume(ext4Size, nil)
	const idZ = "vol-0000000000000dead" // well-formed, not attached here
	stA, tgA := filepath.Join(w, "stA"), filepath.Join(w, "tgA")
	stK, tgK := filepath.Join(w, "stK"), filepath.Join(w, "tgK")
	must(t, os.Mkdir(stA, 0o750))
	must(t, os.Mkdir(stK, 0o750))
	e.mustStage(idA, stA, ext4, nil)
	e.mustPublish(idA, stA, tgA, ext4, false)
	e.mustStage(idK, stK, blk, nil)
	e.mustPublish(idK, stK, tgK, blk, false)
	writeFile(t, filepath.Join(tgA, "on-volume-a"), "A")

	n := e.node
	stage, publish, unstage, unpublish := e.stageCall, e.publishCall, e.unstageCall, e.unpublishCall
	expand, stats, health := e.expandCall, e.statsCall, e.healthCall
	withFlags := func(flags ...string) *csi.VolumeCapability { return mountCap("ext4", rwo, flags...) }
	mounted := func(path string, want bool) func(t *testing.T) {
		return func(t *testing.T) {
			if got := isMounted(t, path); got != want {
				t.Errorf("%s mounted = %v, want %v", path, got, want)
			}
		}
	}
	t1, t5, t6 := filepath.Join(w, "t1"), filepath.Join(w, "t5"), filepath.Join(w, "t6")

	cases := []safetyCase{
		// 1. Publish checks that the staging path is a mount of this volume's device.
		{name: "1 publish with staging / and no stage", call: publish(idB, "/", t1, ext4, false), want: codes.FailedPrecondition},
		{name: "1 publish of a staged volume with staging /", call: publish(idA, "/", t1, ext4, false), want: codes.FailedPrecondition},
		{name: "1 publish from another volume's staging path", call: publish(idB, stA, t1, ext4, false), want: codes.FailedPrecondition},
		{name: "1 publish from an unmounted directory", call: publish(idA, filepath.Join(w, "emptydir"), t1, ext4, false), want: codes.FailedPrecondition},
		{name: "1 publish from a foreign tmpfs", call: publish(idA, foreign, t1, ext4, false), want: codes.FailedPrecondition},
		{name: "1 publish from a missing staging path", call: publish(idA, filepath.Join(w, "nothere"), t1, ext4, false), want: codes.FailedPrecondition},
		{name: "1 publish without staging path", call: publish(idA, "", t1, ext4, false), want: codes.FailedPrecondition},
		{name: "1 publish of a volume not attached here", call: publish(idZ, stA, t1, ext4, false), want: codes.FailedPrecondition},
		{name: "1 block publish with staging /", call: publish(idK, "/", t1, blk, false), want: codes.FailedPrecondition},
		{name: "1 block publish from another volume's staging path", call: publish(idK, stA, t1, blk, false), want: codes.FailedPrecondition},
		// 2 (sequential half; the concurrent half follows the table). The path is A's: B gets AlreadyExists
		// at stage, and its unstage leaves A's mount alone.
		{name: "2 stage B on A's staging path", call: stage(idB, stA, ext4), want: codes.AlreadyExists},
		{name: "2 unstage B from A's staging path", call: unstage(idB, stA), want: codes.FailedPrecondition, check: mounted(stA, true)},
		{name: "2 stage while the path is held", call: func() error {
			release, _, ok := n.inFlight.acquire("path/" + stK)
			if !ok {
				return fmt.Errorf("path lock busy")
			}
			defer release()
			return e.stage(idB, stK, ext4, nil)
		}, want: codes.Aborted},
		// 3. Unstage and unpublish undo only the volume's own mounts and mount points.
		{name: "3 unpublish of a foreign tmpfs", call: unpublish(idA, foreign), want: codes.FailedPrecondition, check: mounted(foreign, true)},
		{name: "3 unstage of a foreign tmpfs", call: unstage(idA, foreign), want: codes.FailedPrecondition, check: mounted(foreign, true)},
		{name: "3 unpublish of a regular file", call: unpublish(idA, filepath.Join(w, "file.txt")), want: codes.OK},
		{name: "3 unpublish of an empty directory not made by the driver", call: unpublish(idA, filepath.Join(w, "emptydir")), want: codes.OK},
		{name: "3 unpublish of a directory with data", call: unpublish(idA, filepath.Join(w, "etc")), want: codes.OK},
		{name: "3 unpublish through a symlink", call: unpublish(idA, filepath.Join(w, "link")), want: codes.OK},
		{name: "3 unpublish of another volume's target", call: unpublish(idB, tgA), want: codes.FailedPrecondition, check: mounted(tgA, true)},
		{name: "3 unpublish of another volume's block target", call: unpublish(idA, tgK), want: codes.FailedPrecondition, check: mounted(tgK, true)},
		{name: "3 unpublish of a block volume from a filesystem target", call: unpublish(idK, tgA), want: codes.FailedPrecondition},
		{name: "3 unstage of another volume's staging path", call: unstage(idK, stA), want: codes.FailedPrecondition, check: mounted(stA, true)},
		{name: "3 unstage of /", call: unstage(idA, "/"), want: codes.FailedPrecondition},
		{name: "3 unpublish of /", call: unpublish(idA, "/"), want: codes.FailedPrecondition},
		{name: "3 unpublish of a missing path", call: unpublish(idA, filepath.Join(w, "nothere")), want: codes.OK},
		// 4. Expand and stats act only on a path holding the volume.
		{name: "4 expand /", call: expand(idA, "/", nil), want: codes.NotFound},
		{name: "4 expand / as block", call: expand(idK, "/", blk), want: codes.NotFound},
		{name: "4 expand a foreign tmpfs", call: expand(idA, foreign, nil), want: codes.NotFound},
		{name: "4 expand another volume's target", call: expand(idB, tgA, nil), want: codes.NotFound},
		{name: "4 expand another volume's block target", call: expand(idA, tgK, nil), want: codes.NotFound},
		{name: "4 expand an unmounted directory", call: expand(idA, filepath.Join(w, "emptydir"), nil), want: codes.NotFound},
		{name: "4 expand the volume's target", call: expand(idA, tgA, nil), want: codes.OK},
		{name: "4 expand the volume's staging path", call: expand(idA, stA, nil), want: codes.OK},
		{name: "4 expand a block volume's target", call: expand(idK, tgK, blk), want: codes.OK},
		{name: "4 stats of /", call: stats(idA, "/"), want: codes.NotFound},
		{name: "4 stats of another volume's target", call: stats(idB, tgA), want: codes.NotFound},
		{name: "4 stats of a block target for another volume", call: stats(idA, tgK), want: codes.NotFound},
		{name: "4 stats of a foreign tmpfs", call: stats(idA, foreign), want: codes.NotFound},
		{name: "4 stats of the volume's target", call: stats(idA, tgA), want: codes.OK},
		{name: "4 stats of a block volume's target", call: stats(idK, tgK), want: codes.OK},
		{name: "4 health of / as publish path", call: health(idA, "/", ""), want: codes.OK},
		// 5. Paths must be absolute and clean, and a target must be missing or an empty mount point.
		{name: "5 publish to a relative target", call: publish(idA, stA, "relative/target", ext4, false), want: codes.InvalidArgument},
		{name: "5 publish to a target with ..", call: publish(idA, stA, w+"/bad/../x", ext4, false), want: codes.InvalidArgument},
		{name: "5 publish to a target with a trailing slash", call: publish(idA, stA, t5+"/", ext4, false), want: codes.InvalidArgument},
		{name: "5 publish to a target with //", call: publish(idA, stA, w+"//t5", ext4, false), want: codes.InvalidArgument},
		{name: "5 publish from a relative staging path", call: publish(idA, "stA", t5, ext4, false), want: codes.InvalidArgument},
		{name: "5 publish to /etc", call: publish(idA, stA, "/etc", ext4, false), want: codes.AlreadyExists},
		{name: "5 publish to a directory with data", call: publish(idA, stA, filepath.Join(w, "etc"), ext4, false), want: codes.AlreadyExists},
		{name: "5 publish to a symlink", call: publish(idA, stA, filepath.Join(w, "link"), ext4, false), want: codes.AlreadyExists},
		{name: "5 publish to a regular file", call: publish(idA, stA, filepath.Join(w, "file.txt"), ext4, false), want: codes.AlreadyExists},
		{name: "5 publish to a foreign mount", call: publish(idA, stA, foreign, ext4, false), want: codes.AlreadyExists},
		{name: "5 publish to another volume's target", call: publish(idA, stA, tgK, ext4, false), want: codes.AlreadyExists},
		{name: "5 block publish to a directory with data", call: publish(idK, stK, filepath.Join(w, "etc"), blk, false), want: codes.AlreadyExists},
		{name: "5 publish under a missing parent", call: publish(idA, stA, filepath.Join(w, "nothere", "t"), ext4, false), want: codes.FailedPrecondition},
		{name: "5 publish onto the staging path", call: publish(idA, stA, stA, ext4, false), want: codes.InvalidArgument},
		{name: "5 stage on a relative path", call: stage(idB, "relative/staging", ext4), want: codes.InvalidArgument},
		{name: "5 stage on a path with .", call: stage(idB, w+"/./stB", ext4), want: codes.InvalidArgument},
		{name: "5 stage on /etc", call: stage(idB, "/etc", ext4), want: codes.AlreadyExists},
		{name: "5 stage on a directory with data", call: stage(idB, filepath.Join(w, "etc"), ext4), want: codes.AlreadyExists},
		{name: "5 stage on a foreign mount", call: stage(idB, foreign, ext4), want: codes.AlreadyExists},
		{name: "5 block stage on a foreign mount", call: stage(idB, foreign, blk), want: codes.AlreadyExists},
		{name: "5 unstage a relative path", call: unstage(idA, "stA"), want: codes.InvalidArgument},
		{name: "5 unpublish a relative path", call: unpublish(idA, "tgA"), want: codes.InvalidArgument},
		{name: "5 unpublish a path with ..", call: unpublish(idA, tgA+"/.."), want: codes.InvalidArgument},
		{name: "5 stats of a relative path", call: stats(idA, "some/path"), want: codes.NotFound},
		{name: "5 expand of a relative path", call: expand(idA, "some/path", nil), want: codes.NotFound},
		{name: "5 health with a relative publish path", call: health(idA, "tgA", ""), want: codes.InvalidArgument},
		{name: "5 publish to a fresh target", call: publish(idA, stA, t5, ext4, false), want: codes.OK, own: []string{t5}, check: mounted(t5, true)},
		{name: "5 publish again (idempotent)", call: publish(idA, stA, t5, ext4, false), want: codes.OK, own: []string{t5}},
		{name: "5 publish again read-only", call: publish(idA, stA, t5, ext4, true), want: codes.AlreadyExists, own: []string{t5}},
		{name: "5 unpublish the fresh target", call: unpublish(idA, t5), want: codes.OK, own: []string{t5}, check: gone(t5)},
		// 6. Mount flags are validated at stage and publish; block publish of a filesystem staging is refused.
		{name: "6 stage with a malformed flag", call: stage(idB, filepath.Join(w, "emptydir"), withFlags("rw,exec; x")), want: codes.InvalidArgument},
		{name: "6 publish with a malformed flag", call: publish(idA, stA, t6, withFlags("rw,exec; x"), false), want: codes.InvalidArgument},
		{name: "6 publish with an empty flag", call: publish(idA, stA, t6, withFlags("noexec,"), false), want: codes.InvalidArgument},
		{name: "6 publish with bind", call: publish(idA, stA, t6, withFlags("bind"), false), want: codes.InvalidArgument},
		{name: "6 publish with x-mount.mkdir", call: publish(idA, stA, t6, withFlags("x-mount.mkdir"), false), want: codes.InvalidArgument},
		{name: "6 read-only publish with rw", call: publish(idA, stA, t6, withFlags("rw"), true), want: codes.InvalidArgument},
		{name: "6 stage with a quote in a flag", call: stage(idB, filepath.Join(w, "emptydir"), withFlags(`data="x"`)), want: codes.InvalidArgument},
		{name: "6 block publish of a filesystem-staged volume", call: publish(idA, stA, t6, blk, false), want: codes.FailedPrecondition},
		{name: "6 mount publish of a block-staged volume", call: publish(idK, stK, t6, ext4, false), want: codes.FailedPrecondition},
		{name: "6 block stage where the volume is staged with a filesystem", call: stage(idA, stA, blk), want: codes.AlreadyExists},
		{name: "6 publish with valid flags", call: publish(idA, stA, t6, withFlags("noexec", "nosuid,nodev"), false), want: codes.OK, own: []string{t6},
			check: func(t *testing.T) {
				mi, _, err := mountAt(machine, t6)
				if err != nil || !slices.Contains(strings.Split(mi.Options, ","), "noexec") {
					t.Errorf("target %s not mounted noexec: %+v, %v", t6, mi, err)
				}
			}},
		{name: "6 unpublish the flagged target", call: unpublish(idA, t6), want: codes.OK, own: []string{t6}, check: gone(t6)},
	}
	// 8. Malformed volume IDs are refused at once on every node call.
	for _, bad := range []string{"garbage", "vol-", "vol-" + strings.Repeat("a", 10000), "vol-0123456789ABCDEF0", "vol-../../etc", "vol-0123456789abcdef0 "} {
		label := bad
		if len(label) > 24 {
			label = label[:24] + "..."
		}
		cases = append(cases,
			safetyCase{name: "8 stage " + label, call: stage(bad, filepath.Join(w, "emptydir"), ext4), want: codes.NotFound},
			safetyCase{name: "8 unstage " + label, call: unstage(bad, stA), want: codes.NotFound},
			safetyCase{name: "8 publish " + label, call: publish(bad, stA, t1, ext4, false), want: codes.NotFound},
			safetyCase{name: "8 unpublish " + label, call: unpublish(bad, tgA), want: codes.NotFound},
			safetyCase{name: "8 stats " + label, call: stats(bad, tgA), want: codes.NotFound},
			safetyCase{name: "8 expand " + label, call: expand(bad, tgA, nil), want: codes.NotFound},
			safetyCase{name: "8 health " + label, call: health(bad, tgA, stA), want: codes.NotFound},
		)
	}

	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	snap := func() hostState { return snapshotHost(t, machine, []string{e.dir}, []string{cwd, "/"}) }
	runSafetyCases(t, cases, snap)

	// 2. Two volumes staged concurrently on one path: one wins, the other is refused; nothing stacks, and
	// unstaging the loser leaves the winner's mount.
	t.Run("2 concurrent stage of two volumes on one path", func(t *testing.T) {
		idC, _ := e.volume(ext4Size, nil)
		p := filepath.Join(w, "shared")
		before := snap()
		var wg sync.WaitGroup
		errs := map[string]error{}
		var mu sync.Mutex
		for _, id := range []string{idB, idC} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := e.stage(id, p, ext4, nil)
				mu.Lock()
				errs[id] = err
				mu.Unlock()
			}()
		}
		wg.Wait()
		var winner, loser string
		for id, err := range errs {
			switch status.Code(err) {
			case codes.OK:
				winner = id
			case codes.Aborted, codes.AlreadyExists:
				loser = id
			default:
				t.Errorf("stage %s: %v", id, err)
			}
		}
		if winner == "" || loser == "" {
			t.Fatalf("want one stage to succeed and one refused, got %v", errs)
		}
		infos, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(p))
		if err != nil || len(infos) != 1 {
			t.Fatalf("%d mounts on %s (%v), want 1", len(infos), p, err)
		}
		wantCode(t, e.stage(loser, p, ext4, nil), codes.AlreadyExists, "stage of the loser afterwards")
		_, err = n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: loser, StagingTargetPath: p})
		wantCode(t, err, codes.FailedPrecondition, "unstage of the loser")
		if !isMounted(t, p) {
			t.Fatal("unstage of the loser unmounted the winner")
		}
		e.mustUnstage(winner, p)
		if isMounted(t, p) {
			t.Error("winner still mounted after its unstage")
		}
		for _, d := range changesOutside(before, snap(), []string{p}) {
			t.Errorf("changed outside the volume's paths: %s", d)
		}
	})

	if got := readFile(t, filepath.Join(tgA, "on-volume-a")); got != "A" {
		t.Errorf("volume A's data = %q after the cases", got)
	}
}

// TestMixedCapabilities (7): one volume cannot be both block and mount; the controller refuses the mix where it
// would have created the volume, and does not confirm it, through the one shared capability check.
func TestMixedCapabilities(t *testing.T) {
	c, _ := newTestController(t)
	ctx := context.Background()
	mixed := []*csi.VolumeCapability{mountCap("ext4", rwo), blockCap(rwo)}
	_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "mixed", VolumeCapabilities: mixed,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
	wantCode(t, err, codes.InvalidArgument, "CreateVolume with block and mount")
	vol, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "plain", VolumeCapabilities: mixed[:1],
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: vol.GetVolume().GetVolumeId(), VolumeCapabilities: mixed})
	if err != nil || resp.GetConfirmed() != nil {
		t.Errorf("ValidateVolumeCapabilities with block and mount = %v, %v; want unconfirmed", resp, err)
	}
	if _, err := checkCapabilities(mixed); err == nil {
		t.Error("checkCapabilities accepted block and mount together")
	}
}

// runNodeHealth (9): NodeGetVolumeHealth reports abnormal, with the reason, when the device fails reads, the
// filesystem is in the kernel's error state after failed writes, or the device is going away; and normal for a
// healthy volume. The failures are made with loop devices only: a volume file on a tiny tmpfs that fills up
// (writes fail), and a volume file on an ext4 that is shut down (reads fail).
func runNodeHealth(t *testing.T) {
	e := newNodeEnv(t, NodeOptions{})
	ctx := context.Background()
	ext4 := mountCap("ext4", rwo)
	healthOf := func(id, publishPath, staging string) (map[string]csi.VolumeHealthErrorType, error) {
		resp, err := e.node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: id, VolumePublishPath: publishPath, StagingTargetPath: staging})
		if err != nil {
			return nil, err
		}
		got := map[string]csi.VolumeHealthErrorType{}
		for _, h := range resp.GetVolumeHealth().GetHealthStatuses() {
			got[h.GetReason()] = h.GetStatus()
			t.Logf("%s: %s %s: %s", id, h.GetStatus(), h.GetReason(), h.GetMessage())
		}
		return got, nil
	}
	// stagedOn stages and publishes a fresh volume whose file lives in dataDir (a filesystem of the test's).
	stagedOn := func(name, dataDir string) (id, staging, target string) {
		backend, err := blockdev.NewLoopBackend(dataDir)
		if err != nil {
			t.Fatal(err)
		}
		env := &nodeEnv{t: t, backend: backend, node: e.node, dir: e.dir}
		id, _ = env.volume(ext4Size, nil)
		staging, target = e.path(name+"-staging"), e.path(name+"-target")
		e.mustStage(id, staging, ext4, nil)
		e.mustPublish(id, staging, target, ext4, false)
		return id, staging, target
	}
	// scratchFS mounts a filesystem for volume files under the env's directory; unmounted at cleanup.
	scratchFS := func(name, fstype, source, opts string) string {
		dir := e.path(name)
		must(t, os.Mkdir(dir, 0o755))
		must(t, unix.Mount(source, dir, fstype, 0, opts))
		var st unix.Stat_t
		must(t, unix.Stat(dir, &st))
		t.Cleanup(func() {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
			// The devices of volume files on it, by the filesystem's device number: once it is unmounted (or
			// this namespace gone) their backing paths lie under no directory a cleanup could name.
			if err := hostclean.ReleaseLoopsOnFilesystem(st.Dev); err != nil {
				t.Logf("cleanup: %v", err)
			}
		})
		return dir
	}

	t.Run("healthy volume", func(t *testing.T) {
		id, staging, target := stagedOn("healthy", t.TempDir())
		got, err := healthOf(id, target, staging)
		if err != nil || len(got) != 0 {
			t.Errorf("health = %v, %v; want no abnormal entries", got, err)
		}
	})

	t.Run("filesystem error state after failed writes", func(t *testing.T) {
		store := scratchFS("full-store", "tmpfs", "tmpfs", "size=8m")
		id, staging, target := stagedOn("full", store)
		// The volume is 64 MiB but its file can only take 8: the writes that do not fit fail in the loop
		// device, and ext4 goes into its error state (emergency read-only).
		f, err := os.Create(filepath.Join(target, "fill"))
		if err != nil {
			t.Fatal(err)
		}
		chunk := bytes.Repeat([]byte{0xa5}, 1<<20)
		for range 24 {
			if _, err := f.Write(chunk); err != nil {
				break
			}
		}
		_ = f.Sync()
		_ = f.Close()
		// Freezing flushes the journal to the metadata's home blocks, which no longer fit either: the journal
		// aborts, as it would at the next checkpoint, and the kernel puts the filesystem in its error state.
		const fiFreeze, fiThaw = 0xc0045877, 0xc0045878 // _IOWR('X', 119/120, int)
		if fd, err := unix.Open(target, unix.O_RDONLY|unix.O_DIRECTORY, 0); err == nil {
			if unix.IoctlSetInt(fd, fiFreeze, 0) == nil {
				_ = unix.IoctlSetInt(fd, fiThaw, 0)
			}
			_ = unix.Close(fd)
		}
		// The kernel records the error in the superblock from a worker: give it a moment.
		var got map[string]csi.VolumeHealthErrorType
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			if got, err = healthOf(id, target, staging); err != nil {
				t.Fatal(err)
			}
			if got["FilesystemReadOnlyAfterErrors"] == inaccessible || got["FilesystemShutdown"] == inaccessible || got["FilesystemErrors"] == degraded {
				return
			}
		}
		t.Errorf("health = %v; want the filesystem's error state reported", got)
	})

	t.Run("device read errors", func(t *testing.T) {
		storeBackend, err := blockdev.NewLoopBackend(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		storeEnv := &nodeEnv{t: t, backend: storeBackend, node: e.node, dir: e.dir}
		_, storeDev := storeEnv.volume(ext4Size, nil)
		if out, err := exec.Command("mkfs.ext4", "-q", storeDev).CombinedOutput(); err != nil {
			t.Fatalf("mkfs.ext4 %s: %v: %s", storeDev, err, out)
		}
		store := scratchFS("shut-store", "ext4", storeDev, "")
		id, staging, target := stagedOn("unreadable", store)
		// Shut the store down: reads of the volume's file, hence of its loop device, fail with EIO.
		fd, err := unix.Open(store, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		const ext4IOCShutdown, noLogFlush = 0x8004587d, 2
		err = unix.IoctlSetPointerInt(fd, ext4IOCShutdown, noLogFlush)
		_ = unix.Close(fd)
		if err != nil {
			t.Fatalf("shut down %s: %v", store, err)
		}
		got, err := healthOf(id, target, staging)
		if err != nil {
			t.Fatal(err)
		}
		if got["DeviceReadError"] != inaccessible {
			t.Errorf("health = %v; want DeviceReadError", got)
		}
	})

	t.Run("device being detached", func(t *testing.T) {
		dataDir := t.TempDir()
		id, staging, target := stagedOn("detached", dataDir)
		// A forced detach of a device in use (what fakecloud does when the instance loses the volume): the
		// kernel releases the device once the mounts go.
		backend, err := blockdev.NewLoopBackend(dataDir)
		if err != nil {
			t.Fatal(err)
		}
		if err := backend.Detach(ctx, id, true); err != nil {
			t.Fatal(err)
		}
		got, err := healthOf(id, target, staging)
		if err != nil {
			t.Fatal(err)
		}
		if got["DetachPending"] != inaccessible {
			t.Errorf("health = %v; want DetachPending", got)
		}
		// Unpublish and unstage still undo the volume's own mounts, though its device is on its way out.
		e.mustUnpublish(id, target)
		e.mustUnstage(id, staging)
	})

	t.Run("missing device", func(t *testing.T) {
		// A block volume staged here (its staging directory is left) whose device is gone.
		staging := e.path("missing-staging")
		must(t, os.Mkdir(staging, 0o750))
		got, err := healthOf("vol-0000000000000dead", "", staging)
		if err != nil || got["DeviceMissing"] != inaccessible {
			t.Errorf("health = %v, %v; want DeviceMissing", got, err)
		}
	})

	t.Run("unknown volume", func(t *testing.T) {
		_, err := healthOf("vol-0000000000000dead", "", "")
		wantCode(t, err, codes.NotFound, "health of a volume not on this node")
	})
}
