module github.com/diskforge/diskforge/tools/kindnode

go 1.26.0

require (
	github.com/diskforge/diskforge/tools/images v0.0.0-00010101000000-000000000000
	github.com/google/go-containerregistry v0.22.1
	github.com/vishvananda/netlink v1.3.1
)

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)

replace github.com/diskforge/diskforge/tools/images => ../images
