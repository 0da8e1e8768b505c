package api

import (
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// fastRestoreXML is EC2's (Enable|Disable|Describe)FastSnapshotRestoreSuccessItem: the three share one shape.
type fastRestoreXML struct {
	SnapshotID            string `xml:"snapshotId"`
	AvailabilityZone      string `xml:"availabilityZone"`
	AvailabilityZoneID    string `xml:"availabilityZoneId,omitempty"`
	State                 string `xml:"state"`
	StateTransitionReason string `xml:"stateTransitionReason,omitempty"`
	OwnerID               string `xml:"ownerId"`
	EnablingTime          string `xml:"enablingTime,omitempty"`
	OptimizingTime        string `xml:"optimizingTime,omitempty"`
	EnabledTime           string `xml:"enabledTime,omitempty"`
	DisablingTime         string `xml:"disablingTime,omitempty"`
	DisabledTime          string `xml:"disabledTime,omitempty"`
}

func (h *Handler) fastRestoreOf(f state.FastSnapshotRestore) fastRestoreXML {
	return fastRestoreXML{SnapshotID: f.SnapshotID, AvailabilityZone: f.Zone, AvailabilityZoneID: h.zoneIDs[f.Zone], State: f.State,
		StateTransitionReason: f.StateTransitionReason, OwnerID: f.OwnerID, EnablingTime: ec2Time(f.EnablingTime),
		OptimizingTime: ec2Time(f.OptimizingTime), EnabledTime: ec2Time(f.EnabledTime), DisablingTime: ec2Time(f.DisablingTime),
		DisabledTime: ec2Time(f.DisabledTime)}
}

type fsrErrorXML struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}

type fsrStateErrorXML struct {
	AvailabilityZone   string      `xml:"availabilityZone,omitempty"`
	AvailabilityZoneID string      `xml:"availabilityZoneId,omitempty"`
	Error              fsrErrorXML `xml:"error"`
}

// fsrErrorItemXML is EC2's (Enable|Disable)FastSnapshotRestoreErrorItem: a snapshot and its refused zones.
type fsrErrorItemXML struct {
	SnapshotID string             `xml:"snapshotId"`
	Errors     []fsrStateErrorXML `xml:"fastSnapshotRestoreStateErrorSet>item"`
}

type fsrChangeResponse struct {
	meta
	Successful   []fastRestoreXML  `xml:"successful>item"`
	Unsuccessful []fsrErrorItemXML `xml:"unsuccessful>item"`
}

func (h *Handler) enableFastSnapshotRestores(p *params) (response, error) {
	return h.changeFastRestores(p, h.state.EnableFastSnapshotRestores)
}

func (h *Handler) disableFastSnapshotRestores(p *params) (response, error) {
	return h.changeFastRestores(p, h.state.DisableFastSnapshotRestores)
}

func (h *Handler) changeFastRestores(p *params, change func(state.FSRInput) (state.FSRResult, error)) (response, error) {
	in := state.FSRInput{Zones: p.list("AvailabilityZone"), SnapshotIDs: p.list("SourceSnapshotId"), DryRun: p.boolean("DryRun")}
	if p.err != nil {
		return nil, p.err
	}
	res, err := change(in)
	if err != nil {
		return nil, err
	}
	out := &fsrChangeResponse{}
	for _, f := range res.Successful {
		out.Successful = append(out.Successful, h.fastRestoreOf(f))
	}
	// One item per snapshot, listing its refused zones, in the order the snapshots were named.
	bySnapshot := map[string]int{}
	for _, e := range res.Unsuccessful {
		i, ok := bySnapshot[e.SnapshotID]
		if !ok {
			i = len(out.Unsuccessful)
			bySnapshot[e.SnapshotID] = i
			out.Unsuccessful = append(out.Unsuccessful, fsrErrorItemXML{SnapshotID: e.SnapshotID})
		}
		out.Unsuccessful[i].Errors = append(out.Unsuccessful[i].Errors, fsrStateErrorXML{AvailabilityZone: e.Zone,
			AvailabilityZoneID: h.zoneIDs[e.Zone], Error: fsrErrorXML{Code: e.Code, Message: e.Message}})
	}
	return out, nil
}

type describeFastRestoresResponse struct {
	meta
	FastSnapshotRestores []fastRestoreXML `xml:"fastSnapshotRestoreSet>item"`
	NextToken            string           `xml:"nextToken,omitempty"`
}

func (h *Handler) describeFastSnapshotRestores(p *params) (response, error) {
	in := state.DescribeInput{Filters: p.filters(), Page: state.Page{MaxResults: p.int32p("MaxResults"), NextToken: p.str("NextToken")}}
	if p.err != nil {
		return nil, p.err
	}
	frs, next, err := h.state.DescribeFastSnapshotRestores(in)
	if err != nil {
		return nil, err
	}
	out := &describeFastRestoresResponse{FastSnapshotRestores: make([]fastRestoreXML, len(frs)), NextToken: next}
	for i, f := range frs {
		out.FastSnapshotRestores[i] = h.fastRestoreOf(f)
	}
	return out, nil
}

type statusDetailXML struct {
	Name   string `xml:"name"`
	Status string `xml:"status"`
}

type volumeStatusInfoXML struct {
	Status  string            `xml:"status"`
	Details []statusDetailXML `xml:"details>item"`
}

type initializationStatusXML struct {
	InitializationType string `xml:"initializationType"`
	Progress           int64  `xml:"progress"`
	// EstimatedTimeToCompleteInSeconds is only reported for a provisioned rate, as EC2 documents.
	EstimatedTimeToCompleteInSeconds *int64 `xml:"estimatedTimeToCompleteInSeconds,omitempty"`
}

// emptySetXML is a set fakecloud never fills (volume events and actions), sent empty as EC2 sends it.
type emptySetXML struct{}

type volumeStatusItemXML struct {
	VolumeID                    string                   `xml:"volumeId"`
	AvailabilityZone            string                   `xml:"availabilityZone"`
	AvailabilityZoneID          string                   `xml:"availabilityZoneId,omitempty"`
	VolumeStatus                volumeStatusInfoXML      `xml:"volumeStatus"`
	ActionsSet                  emptySetXML              `xml:"actionsSet"`
	EventsSet                   emptySetXML              `xml:"eventsSet"`
	InitializationStatusDetails *initializationStatusXML `xml:"initializationStatusDetails,omitempty"`
}

type describeVolumeStatusResponse struct {
	meta
	VolumeStatuses []volumeStatusItemXML `xml:"volumeStatusSet>item"`
	NextToken      string                `xml:"nextToken,omitempty"`
}

func (h *Handler) describeVolumeStatus(p *params) (response, error) {
	in := p.describe("VolumeId")
	if p.err != nil {
		return nil, p.err
	}
	sts, next, err := h.state.DescribeVolumeStatus(in)
	if err != nil {
		return nil, err
	}
	out := &describeVolumeStatusResponse{VolumeStatuses: make([]volumeStatusItemXML, len(sts)), NextToken: next}
	for i, st := range sts {
		x := volumeStatusItemXML{VolumeID: st.VolumeID, AvailabilityZone: st.Zone, AvailabilityZoneID: h.zoneIDs[st.Zone],
			VolumeStatus: volumeStatusInfoXML{Status: st.Status, Details: []statusDetailXML{
				{Name: "io-enabled", Status: "passed"}, {Name: "io-performance", Status: st.IOPerformance}}}}
		if st.Init.Type != "" {
			x.VolumeStatus.Details = append(x.VolumeStatus.Details, statusDetailXML{Name: "initialization-state", Status: st.InitializationState()})
			d := &initializationStatusXML{InitializationType: st.Init.Type, Progress: st.Init.Progress()}
			if st.Init.Type == state.InitProvisionedRate {
				secs := int64((st.Init.Remaining + time.Second - 1) / time.Second)
				d.EstimatedTimeToCompleteInSeconds = &secs
			}
			x.InitializationStatusDetails = d
		}
		out.VolumeStatuses[i] = x
	}
	return out, nil
}
