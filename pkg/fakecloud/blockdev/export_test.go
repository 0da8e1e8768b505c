package blockdev

// NewFuseBackendT is newFuseBackendT for the tests of package blockdev_test, which import packages that
// import this one (iofaults through state).
var NewFuseBackendT = newFuseBackendT
