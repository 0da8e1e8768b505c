//go:build e2e

package scenarios

import (
	"testing"
	"time"
)

// TestE2E runs the scenarios of issue #5 in order, in one namespace: 1, 3 and 4 share scenario 1's volume; 8 fills
// a node to its volume limit beside the volumes the others left and deletes what it made; 7 deletes everything
// and checks that the cluster, the cloud and the host are left clean. A scenario whose
// prerequisite failed or was not run (-run) skips.
func TestE2E(t *testing.T) {
	start := time.Now()
	r := newRun(t)
	recordTiming("setup: nodes, namespace, classes", "ok", time.Since(start))
	r.scenario(t, "S0_volume_limits", scenarioVolumeLimits)
	r.scenario(t, "S1_wffc_zone_b", scenarioWFFCZoneB)
	r.scenario(t, "S2_move_within_zone", scenarioMoveWithinZone)
	r.scenario(t, "S3_online_expansion_xfs", scenarioOnlineExpansion)
	r.scenario(t, "S3b_offline_expansion_ext4", scenarioOfflineExpansion)
	r.scenario(t, "S9_tags", scenarioTags)
	r.scenario(t, "S4_snapshot_restore", scenarioSnapshotRestore)
	r.scenario(t, "S4b_clone", scenarioClone)
	r.scenario(t, "S4c_group_snapshot", scenarioGroupSnapshot)
	r.scenario(t, "S5_block", scenarioBlock)
	r.scenario(t, "S10_provisioned_iops", scenarioProvisionedIOPS)
	r.scenario(t, "S6_allowed_topologies", scenarioAllowedTopologies)
	r.scenario(t, "S11_io_faults", scenarioIOFaults)
	r.scenario(t, "S12_node_metrics", scenarioNodeMetrics)
	r.scenario(t, "S8_volume_limit", scenarioVolumeLimit)
	r.scenario(t, "S7_teardown", scenarioTeardown)
}
