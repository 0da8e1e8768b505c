package state

import (
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// AttrAutoEnableIO is the volume attribute that resumes a volume's I/O by itself after EC2 found its data
// possibly inconsistent. fakecloud never impairs a volume's I/O, so it is kept and shown, and changes nothing
// else. A volume's other attribute, productCodes, is always empty: fakecloud has no Marketplace.
const AttrAutoEnableIO = "autoEnableIO"

func checkVolumeAttribute(attr string) error {
	if attr != AttrAutoEnableIO && attr != AttrProductCodes {
		return ec2err.InvalidValue("Attribute", attr, "Expecting autoEnableIO or productCodes.")
	}
	return nil
}

// DescribeVolumeAttribute returns a volume's autoEnableIO, once the attribute is known to be one a volume has.
func (s *State) DescribeVolumeAttribute(id, attr string) (autoEnableIO bool, err error) {
	s.read(func(time.Time) {
		if err = checkVolumeAttribute(attr); err != nil {
			return
		}
		var v *Volume
		if v, err = s.volume(id); err == nil {
			autoEnableIO = v.AutoEnableIO
		}
	})
	return autoEnableIO, err
}

// ModifyVolumeAttribute sets a volume's autoEnableIO, the one attribute ModifyVolumeAttribute changes.
func (s *State) ModifyVolumeAttribute(id string, autoEnableIO *bool, dryRun bool) error {
	return s.mutate(func(time.Time) error {
		v, err := s.volume(id)
		if err != nil {
			return err
		}
		if autoEnableIO == nil {
			return ec2err.Missing("AutoEnableIO")
		}
		if dryRun {
			return ec2err.DryRun()
		}
		if v.AutoEnableIO != *autoEnableIO {
			v.AutoEnableIO = *autoEnableIO
			s.markDirty(kindVolume, v.ID)
		}
		return nil
	})
}
