package testutil

import "unsafe"

// AlignedBuf returns n bytes aligned to the page, as O_DIRECT needs.
func AlignedBuf(n int) []byte {
	const align = 4096
	raw := make([]byte, n+align)
	skip := (align - int(uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%align)) % align
	return raw[skip : skip+n]
}
