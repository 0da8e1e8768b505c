package fakecloudtest

import (
	"net/http"
	"os"
	"sort"
	"testing"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/ec2model"
)

// EnvCheckModel, set to anything but "" or "0", makes every Env record its EC2 traffic and hold it to EC2's
// service model when its test ends (CheckModel), so that a whole suite's traffic is checked. pkg/fakecloud's
// tests set it; DISKFORGE_CHECK_EC2_MODEL=0 turns that off.
const EnvCheckModel = "DISKFORGE_CHECK_EC2_MODEL"

// NewerThanModel are actions fakecloud serves that an older installed model may lack, with what they are;
// they are checked whenever the model has them.
var NewerThanModel = map[string]string{
	"CopyVolumes":             "volume copies, newer than the botocore Debian 12's awscli 2.9.19 carries",
	"LockSnapshot":            "snapshot lock, newer than awscli 2.9.19's botocore",
	"UnlockSnapshot":          "snapshot lock, newer than awscli 2.9.19's botocore",
	"DescribeLockedSnapshots": "snapshot lock, newer than awscli 2.9.19's botocore",
}

// newerMembers are members (parameter or element names) and enum values fakecloud uses that EC2 added after the
// botocore inside Debian 12's awscli 2.9.19, the oldest model hack/deps.sh may leave: with such a model, their
// absence from it is no mismatch. Keyed by shape, then name; a newer model has them and checks them in full.
var newerMembers = map[[2]string]string{
	{"CreateVolumeRequest", "AvailabilityZoneId"}:                      "zone IDs in CreateVolume",
	{"CreateVolumeRequest", "AvailabilityZone"}:                        "no longer required once AvailabilityZoneId may name the zone",
	{"CreateVolumeRequest", "VolumeInitializationRate"}:                "volume initialization rate",
	{"Volume", "availabilityZoneId"}:                                   "zone IDs in volumes",
	{"Volume", "sourceVolumeId"}:                                       "CopyVolumes",
	{"Volume", "volumeInitializationRate"}:                             "volume initialization rate",
	{"Snapshot", "completionTime"}:                                     "snapshot completion time",
	{"Placement", "availabilityZoneId"}:                                "zone IDs in instance placement",
	{"EbsInfo", "maximumEbsAttachments"}:                               "dedicated EBS attachment limits",
	{"EbsInfo", "attachmentLimitType"}:                                 "dedicated EBS attachment limits",
	{"EnableFastSnapshotRestoreSuccessItem", "availabilityZoneId"}:     "zone IDs in fast snapshot restores",
	{"DisableFastSnapshotRestoreSuccessItem", "availabilityZoneId"}:    "zone IDs in fast snapshot restores",
	{"DescribeFastSnapshotRestoreSuccessItem", "availabilityZoneId"}:   "zone IDs in fast snapshot restores",
	{"EnableFastSnapshotRestoreStateErrorItem", "availabilityZoneId"}:  "zone IDs in fast snapshot restores",
	{"DisableFastSnapshotRestoreStateErrorItem", "availabilityZoneId"}: "zone IDs in fast snapshot restores",
	{"VolumeStatusItem", "availabilityZoneId"}:                         "zone IDs in volume status",
	{"VolumeStatusItem", "initializationStatusDetails"}:                "volume initialization status",
	{"VolumeStatusName", "initialization-state"}:                       "volume initialization status",
	{"CopySnapshotRequest", "DestinationAvailabilityZone"}:             "snapshot copies to Local Zones",
	{"CreateSnapshotsRequest", "Location"}:                             "local snapshots on Outposts",
	{"StopInstancesRequest", "SkipOsShutdown"}:                         "skipping the OS shutdown",
	{"TerminateInstancesRequest", "SkipOsShutdown"}:                    "skipping the OS shutdown",
	{"TerminateInstancesRequest", "Force"}:                             "forced termination",
}

// knownMismatches are departures from the model fakecloud keeps on purpose, each with EC2's documented reason,
// keyed by action and the mismatch's place. None today.
var knownMismatches = map[[2]string]string{}

// LocateModel returns the newest EC2 service model installed, skipping the test (failing it in CI) when there
// is none.
func LocateModel(t testing.TB) ec2model.Found {
	t.Helper()
	found, all, err := ec2model.Locate()
	if found.Model == nil {
		testutil.SkipUnless(t, err, "EC2's service model is needed (Debian's awscli or python3-botocore ships it)")
	}
	for _, f := range all {
		t.Logf("EC2 model found: %s, %d operations, %s", f.Package, len(f.Model.Operations()), f.Model.Path)
	}
	return found
}

// CheckModel holds what rec recorded to found's model and fails the test on each mismatch: every request
// fakecloud answered with success against the action's input shape, every parameter name fakecloud read against
// it, and every successful reply against the output shape. It returns how many successful replies each action
// had. Actions the model lacks are left out.
func CheckModel(t testing.TB, found ec2model.Found, rec *Recorder) map[string]int {
	t.Helper()
	model := found.Model
	exercised := map[string]int{}
	var mismatches []ec2model.Mismatch
	for _, x := range rec.Exchanges() {
		if x.Status != http.StatusOK || !model.HasOperation(x.Action) {
			continue
		}
		exercised[x.Action]++
		mismatches = append(mismatches, model.CheckRequest(x.Action, x.Form)...)
		mismatches = append(mismatches, model.CheckReply(x.Action, x.Body)...)
	}
	reads := rec.ParamsRead()
	actions := make([]string, 0, len(reads))
	for action := range reads {
		actions = append(actions, action)
	}
	sort.Strings(actions)
	for _, action := range actions {
		if !model.HasOperation(action) {
			continue
		}
		names := reads[action]
		sort.Strings(names)
		for _, n := range names {
			for _, m := range model.CheckParamName(action, n) {
				m.What = "fakecloud reads it: " + m.What
				mismatches = append(mismatches, m)
			}
		}
	}
	seen := map[string]bool{}
	for _, m := range mismatches {
		key := m.String()
		if seen[key] {
			continue
		}
		seen[key] = true
		if why, ok := newerMembers[[2]string{m.Shape, m.Name}]; ok && m.Name != "" {
			t.Logf("newer than %s's model: %s (%s)", found.Package, m, why)
			continue
		}
		if why, ok := knownMismatches[[2]string{m.Action, m.Where}]; ok {
			t.Logf("known: %s (%s)", m, why)
			continue
		}
		t.Errorf("EC2's model (%s) and fakecloud differ: %s", found.Package, m)
	}
	return exercised
}

// checkModelAtEnd records o's traffic and checks it when the test ends, if EnvCheckModel asks for it. Without a
// model the test goes on unchecked (CI fails it, as it must have one).
func checkModelAtEnd(t testing.TB, o *Options) {
	if v := os.Getenv(EnvCheckModel); v == "" || v == "0" {
		return
	}
	found, _, err := ec2model.Locate()
	if found.Model == nil {
		if testutil.InCI() {
			t.Errorf("%s is set but EC2's service model is not installed: %v", EnvCheckModel, err)
		} else {
			t.Logf("%s is set but EC2's service model is not installed, traffic unchecked: %v", EnvCheckModel, err)
		}
		return
	}
	if o.Recorder == nil {
		o.Recorder = &Recorder{}
	}
	rec := o.Recorder
	t.Cleanup(func() { CheckModel(t, found, rec) })
}
