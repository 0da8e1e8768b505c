package api

// addSnapshotActions registers the snapshot copy, sharing, multi-volume and encryption-by-default actions.
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
	} {
		h.actions[name] = fn
	}
}
