package api

// addSnapshotActions registers the snapshot copy, sharing, multi-volume, lock, storage tier and
// encryption-by-default actions.
func (h *Handler) addSnapshotActions() {
	for name, fn := range map[string]actionFunc{
		"CopySnapshot":                  h.copySnapshot,
		"CreateSnapshots":               h.createSnapshots,
		"DescribeSnapshotAttribute":     h.describeSnapshotAttribute,
		"ModifySnapshotAttribute":       h.modifySnapshotAttribute,
		"ResetSnapshotAttribute":        h.resetSnapshotAttribute,
		"GetEbsEncryptionByDefault":     h.getEbsEncryptionByDefault,
		"EnableEbsEncryptionByDefault":  h.enableEbsEncryptionByDefault,
		"DisableEbsEncryptionByDefault": h.disableEbsEncryptionByDefault,
		"GetEbsDefaultKmsKeyId":         h.getEbsDefaultKmsKeyID,
		"ModifyEbsDefaultKmsKeyId":      h.modifyEbsDefaultKmsKeyID,
		"ResetEbsDefaultKmsKeyId":       h.resetEbsDefaultKmsKeyID,
		"LockSnapshot":                  h.lockSnapshot,
		"UnlockSnapshot":                h.unlockSnapshot,
		"DescribeLockedSnapshots":       h.describeLockedSnapshots,
		"ModifySnapshotTier":            h.modifySnapshotTier,
		"RestoreSnapshotTier":           h.restoreSnapshotTier,
		"DescribeSnapshotTierStatus":    h.describeSnapshotTierStatus,
	} {
		h.actions[name] = fn
	}
}
