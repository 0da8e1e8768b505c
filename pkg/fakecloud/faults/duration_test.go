package faults

import (
	"encoding/json"
	"testing"
	"time"
)

func TestDurationJSON(t *testing.T) {
	b, err := json.Marshal(map[string]Duration{"CreateVolume": Duration(200 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"CreateVolume":"200ms"}`; got != want {
		t.Errorf("marshal = %s, want %s", got, want)
	}

	tests := []struct {
		in   string
		want Duration
		ok   bool
	}{
		{`"1.5s"`, Duration(1500 * time.Millisecond), true},
		{`"0s"`, 0, true},
		{`"5"`, 0, false},
		{`"soon"`, 0, false},
		{`200`, 0, false}, // a bare number's unit would be a guess
	}
	for _, tt := range tests {
		var d Duration
		err := json.Unmarshal([]byte(tt.in), &d)
		if (err == nil) != tt.ok || (tt.ok && d != tt.want) {
			t.Errorf("unmarshal %s = %v, %v; want %v ok=%v", tt.in, d, err, tt.want, tt.ok)
		}
	}
}
