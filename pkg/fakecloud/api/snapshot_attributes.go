package api

import (
	"strconv"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

type createVolumePermissionXML struct {
	UserID string `xml:"userId,omitempty"`
	Group  string `xml:"group,omitempty"`
}

type describeSnapshotAttributeResponse struct {
	meta
	SnapshotID  string                       `xml:"snapshotId"`
	Permissions *[]createVolumePermissionXML `xml:"createVolumePermission>item,omitempty"`
	// ProductCodes is always empty: fakecloud has no Marketplace.
	ProductCodes *struct{} `xml:"productCodes,omitempty"`
}

func (h *Handler) describeSnapshotAttribute(p *params) (response, error) {
	id, attr := p.required("SnapshotId"), p.required("Attribute")
	if p.err != nil {
		return nil, p.err
	}
	perms, err := h.state.DescribeSnapshotAttribute(id, attr)
	if err != nil {
		return nil, err
	}
	out := &describeSnapshotAttributeResponse{SnapshotID: id}
	if attr == state.AttrProductCodes {
		out.ProductCodes = &struct{}{}
		return out, nil
	}
	list := []createVolumePermissionXML{}
	if perms.Public {
		list = append(list, createVolumePermissionXML{Group: "all"})
	}
	for _, u := range perms.UserIDs {
		list = append(list, createVolumePermissionXML{UserID: u})
	}
	out.Permissions = &list
	return out, nil
}

// permissionList reads prefix.N.UserId / prefix.N.Group (CreateVolumePermission.Add, .Remove).
func (p *params) permissionList(prefix string) (users, groups []string) {
	for _, i := range p.indexes(prefix, "UserId", "Group") {
		base := prefix + "." + strconv.Itoa(i)
		if u := p.str(base + ".UserId"); u != "" {
			users = append(users, u)
		}
		if g := p.str(base + ".Group"); p.has(base + ".Group") {
			groups = append(groups, g)
		}
	}
	return users, groups
}

// modifySnapshotAttribute takes either form EC2 has: CreateVolumePermission.Add/Remove lists, or
// OperationType with UserId.N and UserGroup.N.
func (h *Handler) modifySnapshotAttribute(p *params) (response, error) {
	id := p.required("SnapshotId")
	ch := state.PermissionChange{Attribute: p.str("Attribute"), DryRun: p.boolean("DryRun")}
	ch.Add.UserIDs, ch.AddGroups = p.permissionList("CreateVolumePermission.Add")
	ch.Remove.UserIDs, ch.RemoveGroups = p.permissionList("CreateVolumePermission.Remove")
	users, groups := p.list("UserId"), p.list("UserGroup")
	switch op := p.str("OperationType"); {
	case p.err != nil:
	case op == "add":
		ch.Add.UserIDs, ch.AddGroups = append(ch.Add.UserIDs, users...), append(ch.AddGroups, groups...)
	case op == "remove":
		ch.Remove.UserIDs, ch.RemoveGroups = append(ch.Remove.UserIDs, users...), append(ch.RemoveGroups, groups...)
	case op != "":
		p.fail(ec2err.InvalidValue("OperationType", op, "Expecting add or remove."))
	case len(users) > 0 || len(groups) > 0:
		p.fail(ec2err.Missing("OperationType"))
	}
	if p.err != nil {
		return nil, p.err
	}
	if err := h.state.ModifySnapshotAttribute(id, ch); err != nil {
		return nil, err
	}
	return &returnResponse{Return: true}, nil
}

func (h *Handler) resetSnapshotAttribute(p *params) (response, error) {
	id, attr, dry := p.required("SnapshotId"), p.required("Attribute"), p.boolean("DryRun")
	if p.err != nil {
		return nil, p.err
	}
	if err := h.state.ResetSnapshotAttribute(id, attr, dry); err != nil {
		return nil, err
	}
	return &returnResponse{Return: true}, nil
}
