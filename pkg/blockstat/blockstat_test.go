package blockstat

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    Stat
		wantErr bool
	}{
		{
			name: "kernel 5.5 and later: discards and flushes",
			text: "     120        3     4096      250       40        7     2048     1300        2      900     1550       5        0       80        1       10        4\n",
			want: Stat{ReadIOs: 120, ReadBytes: 4096 * 512, ReadTime: 250 * time.Millisecond,
				WriteIOs: 40, WriteBytes: 2048 * 512, WriteTime: 1300 * time.Millisecond, InFlight: 2, IOTime: 900 * time.Millisecond},
		},
		{
			name: "kernel before 4.18: eleven fields",
			text: "1 0 8 4 0 0 0 0 0 4 4",
			want: Stat{ReadIOs: 1, ReadBytes: 8 * 512, ReadTime: 4 * time.Millisecond, IOTime: 4 * time.Millisecond},
		},
		{name: "short", text: "1 2 3", wantErr: true},
		{name: "not a number", text: "1 0 8 4 0 0 x 0 0 4 4", wantErr: true},
		{name: "empty", text: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.text)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse: err %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("Parse = %+v, want %+v", got, tt.want)
			}
		})
	}
}
