// Package iofaults injects faults below the EC2 API: I/O errors, added latency, a volume that turned
// read-only and I/O that hangs, on whole volumes or byte ranges. An Injector is a fuseblock.Policy, so it sees
// every block I/O of a volume served by the fuse backend.
//
// Design: the rules live in an immutable set behind an atomic pointer. The hot path loads it, scans a few rules
// and, with no rule, returns at once; it takes no lock and sleeps holding nothing. Replacing the rules swaps
// the pointer and then closes the old set's release channel, which lets go every I/O the old set holds; a
// released I/O asks the new set again, so a hang rule that is still there holds it anew. Each rule of a set
// has its own counters (I/Os faulted, held now, count left), which start at zero with the set.
package iofaults

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"syscall"

	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
)

// Effect is what a rule does to the I/Os it matches.
type Effect string

const (
	// EffectError fails each matching I/O with Rule.Errno (EIO when empty).
	EffectError Effect = "error"
	// EffectLatency delays each matching I/O by Rule.Latency; the delays of several matching rules add up.
	EffectLatency Effect = "latency"
	// EffectReadOnly fails writes and fallocates (discards, write-zeroes) with EROFS and lets reads and flushes
	// through: a volume that turned read-only.
	EffectReadOnly Effect = "readonly"
	// EffectHang holds each matching I/O until the rule is removed (or replaced) or the filesystem closes.
	EffectHang Effect = "hang"
)

// Any matches every volume in Rule.Volume.
const Any = "*"

// MaxRules bounds a rule set: rules are scanned on every I/O.
const MaxRules = 64

// maxLatency bounds a latency rule: longer is a hang, which has a rule of its own.
const maxLatency = faults.Duration(10 * 60 * 1e9)

// Rule is one fault. The zero values of its optional fields mean: every data op, the whole volume, always,
// without end.
type Rule struct {
	// Volume is a volume ID or "*".
	Volume string `json:"volume"`
	// Ops are the kinds of I/O matched: read, write, fsync, fallocate. Empty is all of them (a readonly rule
	// takes none: it is about writes).
	Ops []string `json:"ops,omitempty"`
	// Offset and Length select the bytes [Offset, Offset+Length) of the volume; an I/O matches when its bytes
	// overlap them. Length 0 with Offset 0 is the whole volume; Length 0 with an Offset runs to the end. A
	// ranged rule never matches fsync, which has no bytes.
	Offset int64  `json:"offset,omitempty"`
	Length int64  `json:"length,omitempty"`
	Effect Effect `json:"effect"`
	// Errno names the error of an error rule: EIO (default), ENOSPC, EROFS, … (see Errnos).
	Errno string `json:"errno,omitempty"`
	// Latency is the delay of a latency rule.
	Latency faults.Duration `json:"latency,omitempty"`
	// Probability, when in (0,1), applies the rule to that share of matching I/Os; 0 means always.
	Probability float64 `json:"probability,omitempty"`
	// Count, when positive, applies the rule to the next Count matching I/Os only.
	Count int64 `json:"count,omitempty"`
}

// errnos are the errors an error rule may return. The loop device passes each to its block layer, which keeps
// ENOSPC, ETIMEDOUT, ENOLINK, EAGAIN and ENODATA (as EIO on reads of some paths) and makes the rest EIO: what a
// process reading the device sees is the block layer's verdict, as on a real disk.
var errnos = map[string]syscall.Errno{
	"EIO":       syscall.EIO,
	"ENOSPC":    syscall.ENOSPC,
	"EROFS":     syscall.EROFS,
	"ENODEV":    syscall.ENODEV,
	"ENXIO":     syscall.ENXIO,
	"ETIMEDOUT": syscall.ETIMEDOUT,
	"ENOLINK":   syscall.ENOLINK,
	"ENODATA":   syscall.ENODATA,
	"EAGAIN":    syscall.EAGAIN,
	"EDQUOT":    syscall.EDQUOT,
	"EPERM":     syscall.EPERM,
	"EBADMSG":   syscall.EBADMSG,
}

// Errnos lists the errno names an error rule takes, sorted.
func Errnos() []string {
	out := make([]string, 0, len(errnos))
	for k := range errnos {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

var opNames = map[string]fuseblock.Op{
	"read":      fuseblock.OpRead,
	"write":     fuseblock.OpWrite,
	"fsync":     fuseblock.OpFsync,
	"fallocate": fuseblock.OpFallocate,
}

// opMask is a set of ops, one bit per fuseblock.Op.
type opMask uint8

const allOps = opMask(1<<fuseblock.OpRead | 1<<fuseblock.OpWrite | 1<<fuseblock.OpFsync | 1<<fuseblock.OpFallocate)

func (m opMask) has(op fuseblock.Op) bool { return op < 8 && m&(1<<op) != 0 }

// ErrInvalid marks a rule that cannot be used.
var ErrInvalid = errors.New("invalid I/O fault")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// validVolume accepts "*" and IDs as EC2 makes them (vol-, then hex), and, for tests and hand-made volumes,
// any short ID of letters, digits and dashes.
func validVolume(v string) bool {
	if v == Any {
		return true
	}
	if v == "" || len(v) > 64 {
		return false
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// compiled is a validated rule ready for the hot path.
type compiled struct {
	Rule
	ops      opMask
	ranged   bool
	end      int64 // exclusive; math.MaxInt64 for "to the end"
	errno    syscall.Errno
	describe string
}

// compile validates r and fills in its defaults.
func compile(r Rule) (compiled, error) {
	c := compiled{Rule: r}
	if !validVolume(r.Volume) {
		return c, invalid("volume %q is neither a volume ID nor %q", r.Volume, Any)
	}
	switch r.Effect {
	case EffectError, EffectLatency, EffectReadOnly, EffectHang:
	case "":
		return c, invalid("rule for %s has no effect (error, latency, readonly or hang)", r.Volume)
	default:
		return c, invalid("unknown effect %q (want error, latency, readonly or hang)", r.Effect)
	}
	if r.Effect == EffectReadOnly {
		if len(r.Ops) > 0 {
			return c, invalid("a readonly rule takes no ops: it fails writes and fallocates, and lets reads and flushes through")
		}
		c.ops = 1<<fuseblock.OpWrite | 1<<fuseblock.OpFallocate
	} else if len(r.Ops) == 0 {
		c.ops = allOps
	}
	for _, name := range r.Ops {
		op, ok := opNames[name]
		if !ok {
			return c, invalid("unknown op %q (want read, write, fsync or fallocate)", name)
		}
		if c.ops.has(op) {
			return c, invalid("op %s given twice", name)
		}
		c.ops |= 1 << op
	}
	if r.Offset < 0 || r.Length < 0 {
		return c, invalid("range %d+%d is negative", r.Offset, r.Length)
	}
	c.ranged = r.Offset > 0 || r.Length > 0
	c.end = math.MaxInt64
	if r.Length > 0 {
		if r.Offset > math.MaxInt64-r.Length {
			return c, invalid("range %d+%d overflows", r.Offset, r.Length)
		}
		c.end = r.Offset + r.Length
	}
	if c.ranged && c.ops.has(fuseblock.OpFsync) && len(r.Ops) > 0 {
		return c, invalid("a ranged rule cannot match fsync, which has no byte range")
	}
	if r.Errno != "" && r.Effect != EffectError {
		return c, invalid("errno is only for error rules")
	}
	if r.Effect == EffectError {
		name := strings.ToUpper(r.Errno)
		if name == "" {
			name = "EIO"
		}
		e, ok := errnos[name]
		if !ok {
			return c, invalid("unknown errno %q (want one of %s)", r.Errno, strings.Join(Errnos(), ", "))
		}
		c.Errno, c.errno = name, e
	}
	switch {
	case r.Effect == EffectLatency && (r.Latency <= 0 || r.Latency > maxLatency):
		return c, invalid("latency %s is not in (0, %s]", r.Latency, maxLatency)
	case r.Effect != EffectLatency && r.Latency != 0:
		return c, invalid("latency is only for latency rules")
	}
	if math.IsNaN(r.Probability) || r.Probability < 0 || r.Probability > 1 {
		return c, invalid("probability %v is not in (0, 1]", r.Probability)
	}
	if r.Count < 0 {
		return c, invalid("count %d is negative", r.Count)
	}
	c.describe = describe(c)
	return c, nil
}

// matches tells whether io falls under the rule, before probability and count.
func (c *compiled) matches(io fuseblock.IO) bool {
	if !c.ops.has(io.Op) || (c.Volume != Any && c.Volume != io.Volume) {
		return false
	}
	if !c.ranged {
		return true
	}
	if io.Len <= 0 {
		return false // fsync: no bytes to overlap
	}
	return io.Off < c.end && io.Off+io.Len > c.Offset
}

// describe writes the rule in the --fault-io grammar, for logs.
func describe(c compiled) string {
	var b strings.Builder
	b.WriteString(c.Volume)
	if c.ranged {
		fmt.Fprintf(&b, "@%d+%d", c.Offset, c.Length)
	}
	if len(c.Ops) > 0 {
		b.WriteString(":" + strings.Join(c.Ops, ","))
	}
	switch c.Effect {
	case EffectError:
		b.WriteString(":" + strings.ToLower(c.Errno))
	case EffectLatency:
		b.WriteString(":latency=" + c.Latency.String())
	default:
		b.WriteString(":" + string(c.Effect))
	}
	if c.Probability > 0 {
		fmt.Fprintf(&b, ":p=%v", c.Probability)
	}
	if c.Count > 0 {
		fmt.Fprintf(&b, ":count=%d", c.Count)
	}
	return b.String()
}
