// Package blockstat reads a block device's I/O statistics as the kernel reports them in /sys/block/<dev>/stat
// (the kernel's Documentation/block/stat.rst).
package blockstat

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SectorSize is the unit of the sector fields: 512 bytes whatever the device's own sector size.
const SectorSize = 512

// Stat is what the kernel counted for a device since it appeared. Counters only grow, until the device goes.
type Stat struct {
	// ReadIOs and WriteIOs are completed requests (after merging), ReadBytes and WriteBytes what they moved.
	ReadIOs, WriteIOs     uint64
	ReadBytes, WriteBytes uint64
	// ReadTime and WriteTime are the summed time of the completed requests, from issue to completion: requests
	// in flight together each count (the kernel's read and write ticks).
	ReadTime, WriteTime time.Duration
	// InFlight is the requests issued to the device and not completed yet.
	InFlight uint64
	// IOTime is the wall time the device had requests in flight (io_ticks).
	IOTime time.Duration
}

// fields is how many fields Parse needs: those up to time_in_queue, which every kernel since 2.6 reports.
const fields = 11

// Parse reads the content of a stat file. Fields later kernels added (discards, flushes) are ignored.
func Parse(text string) (Stat, error) {
	f := strings.Fields(text)
	if len(f) < fields {
		return Stat{}, fmt.Errorf("block stat: %d fields, want at least %d", len(f), fields)
	}
	var v [fields]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return Stat{}, fmt.Errorf("block stat field %d: %w", i+1, err)
		}
		v[i] = n
	}
	ms := func(n uint64) time.Duration { return time.Duration(n) * time.Millisecond }
	return Stat{
		ReadIOs: v[0], ReadBytes: v[2] * SectorSize, ReadTime: ms(v[3]),
		WriteIOs: v[4], WriteBytes: v[6] * SectorSize, WriteTime: ms(v[7]),
		InFlight: v[8], IOTime: ms(v[9]),
	}, nil
}
