// Command bench measures the driver through its public interface: the CSI gRPC socket of the driver binary,
// against the fakecloud binary, counting EC2 calls from fakecloud's /metrics.
//
//	go run ./test/bench controller [--drivers before=/tmp/old/driver,after=bin/driver] [--runs 3]
//	go run ./test/bench modify     [--drivers …]
//	go run ./test/bench node       (root, loop devices, mkfs.ext4, mkfs.xfs)
//	go run ./test/bench fuse       (root, loop devices, /dev/fuse, mkfs.ext4, mkfs.xfs)
//
// controller runs N parallel CreateVolume → ControllerPublish → ControllerUnpublish → DeleteVolume cycles for
// each profile (instant transitions and 1 s create/attach/detach, the cycles all at once; and 1 s transitions
// with the cycles arriving evenly over 10 s), with a fresh fakecloud per run, and prints one JSON object per
// run: EC2 calls per cycle and per action, p50/p99 per RPC, wall time, errors; and, on stderr, a line per run
// with the figures issue #24's targets name. Several drivers are run in turn within each round, so their
// numbers come from the same minutes of a noisy machine.
//
// controller --rate-limits ec2 starts fakecloud with EC2's per-action buckets and reports, per run, the floor:
// the shortest time any client could run the burst under those buckets and the transitions (the slowest
// action's (N − capacity)/refill plus the transitions after it), and the wall time as a multiple of it, with
// the calls fakecloud throttled. --sidecar calls as csi-provisioner and csi-attacher do: each attempt under the
// --timeout the manifests give them, DeadlineExceeded, Aborted, Unavailable and ResourceExhausted sent again
// after their backoff (1 s, doubling to 5 min). Every run ends by counting the driver's volumes fakecloud still
// holds (volumesLeft) and those a name's CreateVolume never answered (volumesDuplicated).
//
//	go run ./test/bench controller --rate-limits ec2 --sidecar --cycles 1000 --nodes 50 --profiles instant,1s --start cold --runs 3
//	go run ./test/bench controller --sidecar --fakecloud-args '--fault-error=*=0.3:RequestLimitExceeded:before'
//
// modify sends, per volume, ControllerExpandVolume and ControllerModifyVolume at once and then another
// ControllerModifyVolume, and counts ModifyVolume calls, refusals and errors.
//
// node stages 1 GiB volumes on loop devices through NodeStageVolume and, alternately, runs the same mkfs and
// mount by hand on an identical device, and prints the medians side by side.
//
// fuse compares fakecloud's --backend fuse with --backend loop as a cluster sees them: in each round each
// backend in turn (the first one moving each round) gets a fresh fakecloud (real fsync, provisioned IOPS not
// enforced) and driver, NodeStageVolume formats and mounts blank volumes (ext4, xfs), and a pod's I/O runs on
// the published path (sequential 1 MiB writes with an fsync, 1 MiB O_DIRECT reads, 4 KiB O_DIRECT random reads
// at queue depth 1 and 8, 4 KiB O_DIRECT random writes with an fdatasync every 16), with fakecloud's CPU and
// the machine's per GiB moved. A table gives each backend's median and range and the fuse/loop cost per
// round. Then, per backend, fakecloud's VmRSS and VmHWM with 100 volumes attached over 4 instances, staged,
// and all doing 4 KiB random I/O at once for 20 s (issue #25: at most 200 MiB). Everything the run made is
// released through CSI, and what is left of it (mounts, loop devices under its directory) swept, even after
// a failure or ctrl-C.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: bench controller|modify|node|fuse [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	var err error
	switch os.Args[1] {
	case "controller":
		err = runController(ctx, os.Args[2:])
	case "node":
		err = runNode(ctx, os.Args[2:])
	case "modify":
		err = runModify(ctx, os.Args[2:])
	case "fuse":
		err = runFuse(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown benchmark %q: controller, modify, node or fuse", os.Args[1])
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
