package state

import (
	"fmt"
	"slices"
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// Snapshot attributes, as EC2 names them.
const (
	AttrCreateVolumePermission = "createVolumePermission"
	AttrProductCodes           = "productCodes"
)

// groupAll is the one permission group: everyone (a public snapshot).
const groupAll = "all"

// maxPermissionChanges is EC2's limit on the modifications of one ModifySnapshotAttribute.
const maxPermissionChanges = 500

// SnapshotPermissions is a snapshot's createVolumePermission: the accounts it is shared with, and whether
// the group all has it (public).
type SnapshotPermissions struct {
	UserIDs []string
	Public  bool
}

// PermissionChange is a ModifySnapshotAttribute: Add or Remove accounts and groups.
type PermissionChange struct {
	Attribute string
	Add       SnapshotPermissions
	Remove    SnapshotPermissions
	// AddGroups and RemoveGroups are the groups named, checked to be "all".
	AddGroups, RemoveGroups []string
	DryRun                  bool
}

func checkAttribute(attr string) error {
	if attr != AttrCreateVolumePermission && attr != AttrProductCodes {
		return ec2err.InvalidValue("Attribute", attr, "Expecting createVolumePermission or productCodes.")
	}
	return nil
}

// snapshotByID finds a snapshot, telling a malformed ID from a missing one.
func (s *State) snapshotByID(id string) (*Snapshot, error) {
	if err := checkID("snap", ec2err.CodeInvalidSnapshotIDMalformed, id); err != nil {
		return nil, err
	}
	sn, ok := s.snapshots[id]
	if !ok {
		return nil, notFound(ec2err.CodeInvalidSnapshotNotFound, "snapshot", []string{id})
	}
	return sn, nil
}

// DescribeSnapshotAttribute returns a snapshot's createVolumePermission (productCodes are always none: fakecloud
// has no Marketplace).
func (s *State) DescribeSnapshotAttribute(id, attr string) (SnapshotPermissions, error) {
	var out SnapshotPermissions
	var err error
	s.read(func(time.Time) {
		if err = checkAttribute(attr); err != nil {
			return
		}
		var sn *Snapshot
		if sn, err = s.snapshotByID(id); err != nil || attr != AttrCreateVolumePermission {
			return
		}
		out = SnapshotPermissions{UserIDs: slices.Clone(sn.SharedWith), Public: sn.Public}
	})
	return out, err
}

// ModifySnapshotAttribute adds or removes accounts and the group all to a snapshot's createVolumePermission.
// As on EC2: one operation adds or removes, not both; an encrypted snapshot cannot be made public, and one
// encrypted with the AWS managed key cannot be shared at all.
func (s *State) ModifySnapshotAttribute(id string, ch PermissionChange) error {
	return s.mutate(func(time.Time) error {
		if ch.Attribute == "" {
			ch.Attribute = AttrCreateVolumePermission
		}
		if err := checkAttribute(ch.Attribute); err != nil {
			return err
		}
		sn, err := s.snapshotByID(id)
		if err != nil {
			return err
		}
		if ch.Attribute == AttrProductCodes {
			return ec2err.New(ec2err.CodeInvalidParameterValue, "The attribute productCodes of a snapshot cannot be modified.")
		}
		adding := len(ch.Add.UserIDs) > 0 || len(ch.AddGroups) > 0
		removing := len(ch.Remove.UserIDs) > 0 || len(ch.RemoveGroups) > 0
		switch {
		case adding && removing:
			return ec2err.New(ec2err.CodeInvalidParameterCombination, "You cannot add and remove create volume permissions in the same operation.")
		case !adding && !removing:
			return ec2err.Missing("CreateVolumePermission")
		case len(ch.Add.UserIDs)+len(ch.AddGroups)+len(ch.Remove.UserIDs)+len(ch.RemoveGroups) > maxPermissionChanges:
			return ec2err.New(ec2err.CodeInvalidParameterValue, "At most %d create volume permissions may be modified in one operation.", maxPermissionChanges)
		}
		for _, g := range append(slices.Clone(ch.AddGroups), ch.RemoveGroups...) {
			if g != groupAll {
				return ec2err.InvalidValue("group", g, "The only group is 'all'.")
			}
		}
		for _, u := range append(slices.Clone(ch.Add.UserIDs), ch.Remove.UserIDs...) {
			if !isAccountID(u) {
				return ec2err.InvalidValue("userId", u, "An account ID is 12 digits.")
			}
		}
		if adding && sn.Encrypted {
			if len(ch.AddGroups) > 0 {
				return ec2err.New(ec2err.CodeUnsupportedOperation, "Encrypted snapshots can’t be shared publicly. Specify another snapshot.")
			}
			if sn.KmsKeyID == "" || sn.KmsKeyID == s.ManagedKeyARN() {
				return ec2err.New(ec2err.CodeInvalidParameter, "Snapshots encrypted with the AWS Managed CMK can’t be shared. Specify another snapshot.")
			}
		}
		if ch.DryRun {
			return ec2err.DryRun()
		}
		for _, u := range ch.Add.UserIDs {
			if !slices.Contains(sn.SharedWith, u) {
				sn.SharedWith = append(sn.SharedWith, u)
			}
		}
		sn.SharedWith = slices.DeleteFunc(sn.SharedWith, func(u string) bool { return slices.Contains(ch.Remove.UserIDs, u) })
		if len(sn.SharedWith) == 0 {
			sn.SharedWith = nil
		}
		if len(ch.AddGroups) > 0 {
			sn.Public = true
		}
		if len(ch.RemoveGroups) > 0 {
			sn.Public = false
		}
		s.markDirty(kindSnapshot, sn.ID)
		return nil
	})
}

// ResetSnapshotAttribute makes a snapshot private again: createVolumePermission back to its owner alone.
func (s *State) ResetSnapshotAttribute(id, attr string, dryRun bool) error {
	return s.mutate(func(time.Time) error {
		if err := checkAttribute(attr); err != nil {
			return err
		}
		sn, err := s.snapshotByID(id)
		if err != nil {
			return err
		}
		if attr == AttrProductCodes {
			return ec2err.New(ec2err.CodeInvalidParameterValue, "The attribute productCodes of a snapshot cannot be reset.")
		}
		if dryRun {
			return ec2err.DryRun()
		}
		if sn.Public || len(sn.SharedWith) > 0 {
			sn.Public, sn.SharedWith = false, nil
			s.markDirty(kindSnapshot, sn.ID)
		}
		return nil
	})
}

func isAccountID(s string) bool {
	if len(s) != 12 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// restorableBy reports whether one of the principals of DescribeSnapshots' RestorableBy may create volumes
// from the snapshot: "self" (the caller, fakecloud's one account) when it owns the snapshot or it is shared with
// it or public; "all" when the snapshot is public; an account when it owns it, or the snapshot is shared with
// it or public.
func (s *State) restorableBy(sn *Snapshot, principals []string) bool {
	if len(principals) == 0 {
		return true
	}
	for _, p := range principals {
		who := p
		if p == "self" {
			who = s.cfg.AccountID
		}
		switch {
		case p == groupAll:
			if sn.Public {
				return true
			}
		case who == sn.OwnerID, sn.Public, slices.Contains(sn.SharedWith, who):
			return true
		}
	}
	return false
}

// checkRestorableBy refuses a RestorableBy that is neither self, all nor an account ID.
func checkRestorableBy(principals []string) error {
	for _, p := range principals {
		if p != "self" && p != groupAll && !isAccountID(p) {
			return ec2err.InvalidValue("RestorableBy", p, fmt.Sprintf("Expecting 'self', '%s' or an account ID.", groupAll))
		}
	}
	return nil
}
