package state

import "time"

// createOnce runs a create whose block I/O happens outside the lock (CreateVolume, RunInstances). plan runs
// under the lock and returns one of: the answer to a replayed ClientToken; a channel to wait on while a request
// with the same token is in flight (the plan is then tried again); or the checked request P, its IDs reserved,
// which run carries out. A plan whose commit failed has its reservation released.
func createOnce[R, P any](s *State, plan func(now time.Time) (R, *P, chan struct{}, error), release func(*P), run func(*P) (R, error)) (R, error) {
	for {
		var (
			out     R
			planned *P
			wait    chan struct{}
		)
		err := s.mutate(func(now time.Time) error {
			var err error
			out, planned, wait, err = plan(now)
			return err
		})
		switch {
		case err != nil:
			if planned != nil {
				s.withLock(func() { release(planned) })
			}
			var zero R
			return zero, err
		case wait != nil:
			<-wait
			continue
		case planned == nil:
			return out, nil
		}
		return run(planned)
	}
}
