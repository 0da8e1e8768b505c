package api

import (
	"encoding/xml"
	"net/http"
	"strconv"
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// ec2Namespace is the XML namespace of EC2 API version 2016-11-15.
const ec2Namespace = "http://ec2.amazonaws.com/doc/2016-11-15/"

// response is a reply body; meta gives every reply its requestId.
type response interface{ setRequestID(string) }

type meta struct {
	RequestID string `xml:"requestId"`
}

func (m *meta) setRequestID(id string) { m.RequestID = id }

// writeXML sends body as <ActionResponse xmlns=…>.
func writeXML(w http.ResponseWriter, action, requestID string, body response) error {
	body.setRequestID(requestID)
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write([]byte(xml.Header)); err != nil {
		return err
	}
	start := xml.StartElement{Name: xml.Name{Local: action + "Response"}, Attr: []xml.Attr{{Name: xml.Name{Local: "xmlns"}, Value: ec2Namespace}}}
	return xml.NewEncoder(w).EncodeElement(body, start)
}

// ec2Time formats times as EC2 does: RFC 3339 in UTC with milliseconds.
func ec2Time(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

type tagXML struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

// tagSetXML is a resource's tagSet; nil leaves the element out, as EC2 does for untagged resources.
type tagSetXML struct {
	Items []tagXML `xml:"item"`
}

func tagsXML(tags []state.Tag) *tagSetXML {
	if len(tags) == 0 {
		return nil
	}
	out := &tagSetXML{Items: make([]tagXML, len(tags))}
	for i, t := range tags {
		out.Items[i] = tagXML{Key: t.Key, Value: t.Value}
	}
	return out
}

type attachmentXML struct {
	VolumeID            string `xml:"volumeId"`
	InstanceID          string `xml:"instanceId"`
	Device              string `xml:"device"`
	Status              string `xml:"status"`
	AttachTime          string `xml:"attachTime"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
}

func attachmentOf(a state.Attachment) attachmentXML {
	return attachmentXML{VolumeID: a.VolumeID, InstanceID: a.InstanceID, Device: a.Device, Status: a.State, AttachTime: ec2Time(a.AttachTime),
		DeleteOnTermination: a.DeleteOnTermination}
}

type volumeXML struct {
	VolumeID           string          `xml:"volumeId"`
	Size               int32           `xml:"size"`
	SnapshotID         string          `xml:"snapshotId"`
	SourceVolumeID     string          `xml:"sourceVolumeId,omitempty"`
	AvailabilityZone   string          `xml:"availabilityZone"`
	AvailabilityZoneID string          `xml:"availabilityZoneId,omitempty"`
	Status             string          `xml:"status"`
	CreateTime         string          `xml:"createTime"`
	Attachments        []attachmentXML `xml:"attachmentSet>item"`
	VolumeType         string          `xml:"volumeType"`
	Iops               int32           `xml:"iops,omitempty"`
	Throughput         int32           `xml:"throughput,omitempty"`
	Encrypted          bool            `xml:"encrypted"`
	KmsKeyID           string          `xml:"kmsKeyId,omitempty"`
	MultiAttachEnabled bool            `xml:"multiAttachEnabled"`
	// FastRestored is sent for volumes restored from a snapshot; VolumeInitializationRate when one was asked.
	FastRestored             *bool      `xml:"fastRestored,omitempty"`
	VolumeInitializationRate int32      `xml:"volumeInitializationRate,omitempty"`
	Tags                     *tagSetXML `xml:"tagSet,omitempty"`
}

func (h *Handler) volumeOf(v state.Volume) volumeXML {
	x := volumeXML{VolumeID: v.ID, Size: v.SizeGiB, SnapshotID: v.SnapshotID, SourceVolumeID: v.SourceVolumeID, AvailabilityZone: v.Zone,
		AvailabilityZoneID: h.zoneIDs[v.Zone], Status: v.State, CreateTime: ec2Time(v.CreateTime), VolumeType: v.Type,
		Iops: v.Iops, Throughput: v.Throughput, Encrypted: v.Encrypted, KmsKeyID: v.KmsKeyID, MultiAttachEnabled: v.MultiAttach,
		VolumeInitializationRate: v.InitRate, Tags: tagsXML(v.Tags)}
	if v.SnapshotID != "" {
		x.FastRestored = &v.FastRestored
	}
	x.Attachments = make([]attachmentXML, len(v.Attachments))
	for i, a := range v.Attachments {
		x.Attachments[i] = attachmentOf(a)
	}
	return x
}

type modificationXML struct {
	VolumeID                   string `xml:"volumeId"`
	ModificationState          string `xml:"modificationState"`
	StatusMessage              string `xml:"statusMessage,omitempty"`
	TargetSize                 int32  `xml:"targetSize"`
	TargetIops                 int32  `xml:"targetIops,omitempty"`
	TargetVolumeType           string `xml:"targetVolumeType"`
	TargetThroughput           int32  `xml:"targetThroughput,omitempty"`
	TargetMultiAttachEnabled   bool   `xml:"targetMultiAttachEnabled"`
	OriginalSize               int32  `xml:"originalSize"`
	OriginalIops               int32  `xml:"originalIops,omitempty"`
	OriginalVolumeType         string `xml:"originalVolumeType"`
	OriginalThroughput         int32  `xml:"originalThroughput,omitempty"`
	OriginalMultiAttachEnabled bool   `xml:"originalMultiAttachEnabled"`
	Progress                   int64  `xml:"progress"`
	StartTime                  string `xml:"startTime"`
	EndTime                    string `xml:"endTime,omitempty"`
}

func modificationOf(m state.Modification) modificationXML {
	return modificationXML{VolumeID: m.VolumeID, ModificationState: m.State, StatusMessage: m.StatusMessage,
		TargetSize: m.TargetSize, TargetIops: m.TargetIops, TargetVolumeType: m.TargetType, TargetThroughput: m.TargetThroughput,
		TargetMultiAttachEnabled: m.TargetMulti, OriginalSize: m.OriginalSize, OriginalIops: m.OriginalIops,
		OriginalVolumeType: m.OriginalType, OriginalThroughput: m.OriginalThrough, OriginalMultiAttachEnabled: m.OriginalMulti,
		Progress: m.Progress, StartTime: ec2Time(m.StartTime), EndTime: ec2Time(m.EndTime)}
}

type snapshotXML struct {
	SnapshotID     string     `xml:"snapshotId"`
	VolumeID       string     `xml:"volumeId"`
	Status         string     `xml:"status"`
	StatusMessage  string     `xml:"statusMessage,omitempty"`
	StartTime      string     `xml:"startTime"`
	Progress       string     `xml:"progress"`
	OwnerID        string     `xml:"ownerId"`
	VolumeSize     int32      `xml:"volumeSize"`
	Description    string     `xml:"description"`
	Encrypted      bool       `xml:"encrypted"`
	KmsKeyID       string     `xml:"kmsKeyId,omitempty"`
	StorageTier    string     `xml:"storageTier"`
	RestoreExpiry  string     `xml:"restoreExpiryTime,omitempty"`
	CompletionTime string     `xml:"completionTime,omitempty"`
	Tags           *tagSetXML `xml:"tagSet,omitempty"`
}

func snapshotOf(sn state.Snapshot) snapshotXML {
	return snapshotXML{SnapshotID: sn.ID, VolumeID: sn.VolumeID, Status: sn.State, StatusMessage: sn.StatusMessage, StartTime: ec2Time(sn.StartTime),
		Progress: strconv.Itoa(sn.Progress) + "%", OwnerID: sn.OwnerID, VolumeSize: sn.VolumeSize, Description: sn.Description,
		Encrypted: sn.Encrypted, KmsKeyID: sn.KmsKeyID, StorageTier: sn.StorageTier, RestoreExpiry: ec2Time(sn.RestoreExpiry), CompletionTime: ec2Time(sn.CompletionTime),
		Tags: tagsXML(sn.Tags)}
}
