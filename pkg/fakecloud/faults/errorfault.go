package faults

import (
	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// errorFault draws the error fault of the given phase for action, if any, and counts it down. The caller
// holds i.mu.
func (i *Injector) errorFault(action string, before bool) error {
	key, f, ok := lookup(i.cfg.Errors, action)
	if !ok || f.Before != before || f.Rate <= 0 {
		return nil
	}
	if i.rand() >= f.Rate {
		return nil
	}
	if f.Count > 0 {
		f.Count--
		if f.Count == 0 {
			// Dropping the entry, rather than keeping Count 0, matters: Count 0 means unlimited.
			delete(i.cfg.Errors, key)
		} else {
			i.cfg.Errors[key] = f
		}
	}
	return f.err(action)
}

// err builds the EC2 error f answers with.
func (f ErrorFault) err(action string) *ec2err.Error {
	msg := f.Message
	if msg == "" {
		msg = defaultMessage(f.Code, action)
	}
	e := ec2err.New(f.Code, "%s", msg)
	if f.Status != 0 {
		e.Status = f.Status
	}
	return e
}

// defaultMessage words the common injected codes as EC2 does, so logs and clients see familiar text.
func defaultMessage(code, action string) string {
	switch code {
	case ec2err.CodeRequestLimitExceeded:
		return "Request limit exceeded."
	case ec2err.CodeInternalError:
		return "An internal error has occurred"
	case ec2err.CodeServiceUnavailable:
		return "The service is unavailable. Please try again shortly."
	case ec2err.CodeInsufficientVolumeCapacity:
		return "There is currently insufficient capacity to serve the request. Try again at a later time."
	default:
		return "Injected fault " + code + " for " + action + "."
	}
}
