package api

import (
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

type modifySnapshotTierResponse struct {
	meta
	SnapshotID       string `xml:"snapshotId"`
	TieringStartTime string `xml:"tieringStartTime"`
}

func (h *Handler) modifySnapshotTier(p *params) (response, error) {
	id, tier, dry := p.required("SnapshotId"), p.str("StorageTier"), p.boolean("DryRun")
	if p.err != nil {
		return nil, p.err
	}
	start, err := h.state.ModifySnapshotTier(id, tier, dry)
	if err != nil {
		return nil, err
	}
	return &modifySnapshotTierResponse{SnapshotID: id, TieringStartTime: ec2Time(start)}, nil
}

type restoreSnapshotTierResponse struct {
	meta
	SnapshotID       string `xml:"snapshotId"`
	RestoreStartTime string `xml:"restoreStartTime"`
	RestoreDuration  int32  `xml:"restoreDuration,omitempty"`
	Permanent        bool   `xml:"isPermanentRestore"`
}

func (h *Handler) restoreSnapshotTier(p *params) (response, error) {
	id, days, permanent, dry := p.required("SnapshotId"), p.int32p("TemporaryRestoreDays"), p.boolean("PermanentRestore"), p.boolean("DryRun")
	if p.err != nil {
		return nil, p.err
	}
	tg, err := h.state.RestoreSnapshotTier(id, days, permanent, dry)
	if err != nil {
		return nil, err
	}
	return &restoreSnapshotTierResponse{SnapshotID: id, RestoreStartTime: ec2Time(tg.RestoreStart), RestoreDuration: tg.RestoreDays, Permanent: tg.Permanent}, nil
}

type snapshotTierStatusXML struct {
	SnapshotID           string     `xml:"snapshotId"`
	VolumeID             string     `xml:"volumeId"`
	Status               string     `xml:"status"`
	OwnerID              string     `xml:"ownerId"`
	Tags                 *tagSetXML `xml:"tagSet,omitempty"`
	StorageTier          string     `xml:"storageTier"`
	LastTieringStartTime string     `xml:"lastTieringStartTime,omitempty"`
	LastTieringProgress  *int       `xml:"lastTieringProgress,omitempty"`
	LastTieringOperation string     `xml:"lastTieringOperationStatus,omitempty"`
	ArchivalCompleteTime string     `xml:"archivalCompleteTime,omitempty"`
	RestoreExpiryTime    string     `xml:"restoreExpiryTime,omitempty"`
}

type describeSnapshotTierStatusResponse struct {
	meta
	Statuses  []snapshotTierStatusXML `xml:"snapshotTierStatusSet>item"`
	NextToken string                  `xml:"nextToken,omitempty"`
}

func (h *Handler) describeSnapshotTierStatus(p *params) (response, error) {
	in := state.DescribeInput{Filters: p.filters(), Page: state.Page{MaxResults: p.int32p("MaxResults"), NextToken: p.str("NextToken")}}
	if p.err != nil {
		return nil, p.err
	}
	sts, next, err := h.state.DescribeSnapshotTierStatus(in)
	if err != nil {
		return nil, err
	}
	out := &describeSnapshotTierStatusResponse{Statuses: make([]snapshotTierStatusXML, len(sts)), NextToken: next}
	for i, st := range sts {
		x := snapshotTierStatusXML{SnapshotID: st.ID, VolumeID: st.VolumeID, Status: st.State, OwnerID: st.OwnerID, Tags: tagsXML(st.Tags),
			StorageTier: st.StorageTier, LastTieringOperation: st.LastOperation, RestoreExpiryTime: ec2Time(st.RestoreExpiry)}
		if tg := st.Tiering; tg != nil {
			progress := st.Progress
			x.LastTieringStartTime, x.LastTieringProgress = ec2Time(tg.ArchiveStart), &progress
			if !tg.RestoreStart.IsZero() {
				x.LastTieringStartTime = ec2Time(tg.RestoreStart)
			}
			if st.LastOperation != state.TieringArchiving {
				x.ArchivalCompleteTime = ec2Time(tg.ArchivedAt)
			}
		}
		out.Statuses[i] = x
	}
	return out, nil
}
