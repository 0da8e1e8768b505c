package iolimits

import "math"

// Spec is what a volume is, as far as its performance goes: its type, size and the IOPS and throughput it
// is provisioned with (0 where the type takes none). fakecloud's state gives it; this package depends on
// nothing of fakecloud's but fuseblock.
type Spec struct {
	Type       string
	SizeGiB    int32
	Iops       int32
	Throughput int32 // MiB/s
}

// Limits are the rates a volume is held to. A zero rate is not limited.
type Limits struct {
	// Unit is the I/O size counted as one operation: an I/O of up to Unit bytes is one, a larger one
	// ceil(len/Unit).
	Unit int64
	// IOPS and Throughput (bytes/s) are the sustained rates.
	IOPS, Throughput float64
	// BurstIOPS and BurstThroughput are peaks a volume reaches while it holds credits; IOPSCredits (operations)
	// and ThroughputCredits (bytes) are its credit balance when full, earned back at the sustained rate. Zero
	// credits: no burst model, the sustained rate is the peak.
	BurstIOPS, IOPSCredits             float64
	BurstThroughput, ThroughputCredits float64
}

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30

	// ssdUnit and hddUnit are the I/O sizes EBS counts as one operation (CloudWatch's VolumeConsumedReadWriteOps:
	// "normalized to 256K capacity units"; HDD volumes count 1 MiB).
	ssdUnit = 256 * kib
	hddUnit = 1 * mib
)

// ForSpec is EBS's published performance of a volume. Unknown types are not limited.
//
//   - gp3: its IOPS and throughput (3,000 and 125 MiB/s when none are given).
//   - gp2: 3 IOPS per GiB, at least 100 and at most 16,000; below 3,000 it bursts to 3,000 IOPS on a balance of
//     5.4 million I/O credits, full at creation. Throughput 128 MiB/s up to 170 GiB, 250 MiB/s above (EBS gives
//     250 from 334 GiB, and between 170 and 334 GiB only while bursting: simplified to the higher figure).
//   - io1, io2: the provisioned IOPS; throughput 256 KiB per IOPS, at most 1,000 MiB/s (io1) or 4,000 (io2).
//   - st1, sc1: throughput 40 (st1) or 12 (sc1) MiB/s per TiB, bursting to 250 (st1) or 80 (sc1) MiB/s per
//     TiB on a balance of 1 TiB of credits per TiB, full at creation; at most 500 (st1) or 250 (sc1) MiB/s
//     either way; 500 (st1) or 250 (sc1) IOPS of 1 MiB.
//   - standard (magnetic): 100 IOPS (EBS: "about 100 on average, bursting to hundreds") and 90 MiB/s (the top
//     of EBS's 40–90), 1 MiB I/O units.
func ForSpec(s Spec) Limits {
	size := float64(max(s.SizeGiB, 0))
	tib := size / 1024
	switch s.Type {
	case "gp3":
		iops, tp := s.Iops, s.Throughput
		if iops <= 0 {
			iops = 3000
		}
		if tp <= 0 {
			tp = 125
		}
		return Limits{Unit: ssdUnit, IOPS: float64(iops), Throughput: float64(tp) * mib}
	case "gp2":
		base := min(max(3*size, 100), 16000)
		l := Limits{Unit: ssdUnit, IOPS: base, Throughput: 128 * mib}
		if s.SizeGiB > 170 {
			l.Throughput = 250 * mib
		}
		if base < 3000 {
			l.BurstIOPS, l.IOPSCredits = 3000, 5.4e6
		}
		return l
	case "io1", "io2":
		ceiling := 1000.0
		if s.Type == "io2" {
			ceiling = 4000
		}
		iops := float64(max(s.Iops, 100))
		return Limits{Unit: ssdUnit, IOPS: iops, Throughput: math.Min(iops*ssdUnit, ceiling*mib)}
	case "st1", "sc1":
		base, burst, ceiling, iops := 40.0, 250.0, 500.0, 500.0
		if s.Type == "sc1" {
			base, burst, ceiling, iops = 12, 80, 250, 250
		}
		return Limits{Unit: hddUnit, IOPS: iops,
			Throughput:      math.Min(base*tib, ceiling) * mib,
			BurstThroughput: math.Min(burst*tib, ceiling) * mib, ThroughputCredits: size * gib}
	case "standard":
		return Limits{Unit: hddUnit, IOPS: 100, Throughput: 90 * mib}
	}
	return Limits{}
}

// Ops is how many operations an I/O of n bytes counts as.
func (l Limits) Ops(n int64) float64 {
	if l.Unit <= 0 || n <= l.Unit {
		return 1
	}
	return float64((n + l.Unit - 1) / l.Unit)
}
