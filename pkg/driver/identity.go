package driver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// IdentityServer tells the CO who the driver is and what it can do.
type IdentityServer struct {
	csi.UnimplementedIdentityServer
	name, version string
	controller    bool
	ready         func(context.Context) error
}

// NewIdentityServer serves the identity of a driver. ready, when set, is consulted by Probe.
func NewIdentityServer(name, version string, controller bool, ready func(context.Context) error) *IdentityServer {
	return &IdentityServer{name: name, version: version, controller: controller, ready: ready}
}

func (s *IdentityServer) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: s.name, VendorVersion: s.version}, nil
}

func (s *IdentityServer) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	caps := []*csi.PluginCapability{
		{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}},
	}
	if s.controller {
		caps = append(caps,
			&csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}},
			&csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS}}},
			&csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE}}},
		)
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

func (s *IdentityServer) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if s.ready != nil {
		if err := s.ready(ctx); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "not ready: %v", err)
		}
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
