package faults

import (
	"fmt"
	"time"
)

// Duration is a time.Duration that travels as text ("200ms") in JSON and flags, so the admin endpoint's
// documents stay readable and editable by hand.
type Duration time.Duration

// String formats d like time.Duration does.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes d as "200ms"; encoding/json uses it to emit a JSON string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads any time.ParseDuration text. Bare JSON numbers are refused because their unit would be
// a guess.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return fmt.Errorf("duration %q: %w", text, err)
	}
	*d = Duration(v)
	return nil
}
