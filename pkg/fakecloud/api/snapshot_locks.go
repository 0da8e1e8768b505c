package api

import (
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

type lockedSnapshotXML struct {
	SnapshotID             string `xml:"snapshotId"`
	OwnerID                string `xml:"ownerId,omitempty"`
	LockState              string `xml:"lockState"`
	LockDuration           int32  `xml:"lockDuration,omitempty"`
	CoolOffPeriod          int32  `xml:"coolOffPeriod,omitempty"`
	CoolOffPeriodExpiresOn string `xml:"coolOffPeriodExpiresOn,omitempty"`
	LockCreatedOn          string `xml:"lockCreatedOn"`
	LockDurationStartTime  string `xml:"lockDurationStartTime,omitempty"`
	LockExpiresOn          string `xml:"lockExpiresOn"`
}

func lockedSnapshotOf(l state.LockedSnapshot) lockedSnapshotXML {
	return lockedSnapshotXML{SnapshotID: l.SnapshotID, OwnerID: l.OwnerID, LockState: l.State, LockDuration: l.Lock.DurationDays,
		CoolOffPeriod: l.Lock.CoolOffHours, CoolOffPeriodExpiresOn: ec2Time(l.Lock.CoolOffEnds), LockCreatedOn: ec2Time(l.Lock.CreatedOn),
		LockDurationStartTime: ec2Time(l.Lock.DurationStart), LockExpiresOn: ec2Time(l.Lock.ExpiresOn)}
}

type lockSnapshotResponse struct {
	meta
	lockedSnapshotXML
}

func (h *Handler) lockSnapshot(p *params) (response, error) {
	in := state.LockSnapshotInput{SnapshotID: p.required("SnapshotId"), Mode: p.required("LockMode"),
		DurationDays: p.int32p("LockDuration"), CoolOffHours: p.int32p("CoolOffPeriod"), DryRun: p.boolean("DryRun")}
	if raw := p.str("ExpirationDate"); p.err == nil && p.has("ExpirationDate") {
		t, err := time.Parse(time.RFC3339Nano, raw)
		if err != nil {
			p.fail(ec2err.InvalidValue("ExpirationDate", raw, "Expecting a time such as 2026-01-02T03:04:05.000Z."))
		}
		in.ExpirationDate = &t
	}
	if p.err != nil {
		return nil, p.err
	}
	l, err := h.state.LockSnapshot(in)
	if err != nil {
		return nil, err
	}
	x := lockedSnapshotOf(l)
	x.OwnerID = "" // not in LockSnapshot's reply
	return &lockSnapshotResponse{lockedSnapshotXML: x}, nil
}

type unlockSnapshotResponse struct {
	meta
	SnapshotID string `xml:"snapshotId"`
}

func (h *Handler) unlockSnapshot(p *params) (response, error) {
	id, dry := p.required("SnapshotId"), p.boolean("DryRun")
	if p.err != nil {
		return nil, p.err
	}
	if err := h.state.UnlockSnapshot(id, dry); err != nil {
		return nil, err
	}
	return &unlockSnapshotResponse{SnapshotID: id}, nil
}

type describeLockedSnapshotsResponse struct {
	meta
	Snapshots []lockedSnapshotXML `xml:"snapshotSet>item"`
	NextToken string              `xml:"nextToken,omitempty"`
}

func (h *Handler) describeLockedSnapshots(p *params) (response, error) {
	in := p.describe("SnapshotId")
	if p.err != nil {
		return nil, p.err
	}
	locks, next, err := h.state.DescribeLockedSnapshots(in)
	if err != nil {
		return nil, err
	}
	out := &describeLockedSnapshotsResponse{Snapshots: make([]lockedSnapshotXML, len(locks)), NextToken: next}
	for i, l := range locks {
		out.Snapshots[i] = lockedSnapshotOf(l)
	}
	return out, nil
}
