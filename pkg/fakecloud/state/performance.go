package state

// Performance is what a volume is provisioned with now: the figures its I/O is held to.
type Performance struct {
	Type       string
	SizeGiB    int32
	Iops       int32 // 0 where the type takes none (gp2 shows its baseline)
	Throughput int32 // MiB/s; 0 where the type takes none
}

// VolumePerformance gives a volume's performance in effect, for the block layer's I/O limits. A modification
// takes effect when it starts optimizing, the moment its new size becomes usable (transitions.go: optimize):
// EBS's performance is somewhere between source and target while optimizing, and the target is the simpler
// choice a workload can see at once. Only the lock is taken: no transition is advanced and nothing committed
// (the run loop advances transitions when they fall due), so the block layer may call it often.
func (s *State) VolumePerformance(volumeID string) (Performance, error) {
	var (
		p   Performance
		err error
	)
	s.withLock(func() {
		var v *Volume
		if v, err = s.volume(volumeID); err == nil {
			p = Performance{Type: v.Type, SizeGiB: v.SizeGiB, Iops: v.Iops, Throughput: v.Throughput}
		}
	})
	return p, err
}
