package api

type encryptionByDefaultResponse struct {
	meta
	EncryptionByDefault bool   `xml:"ebsEncryptionByDefault"`
	SseType             string `xml:"sseType,omitempty"`
}

type defaultKmsKeyResponse struct {
	meta
	KmsKeyID string `xml:"kmsKeyId"`
}

// getEbsEncryptionByDefault is a read: the handler answers its DryRun once it succeeds.
func (h *Handler) getEbsEncryptionByDefault(p *params) (response, error) {
	on, _, err := h.state.EBSEncryption(false)
	if err != nil {
		return nil, err
	}
	return &encryptionByDefaultResponse{EncryptionByDefault: on}, nil
}

func (h *Handler) enableEbsEncryptionByDefault(p *params) (response, error) {
	return h.setEncryptionByDefault(p, true)
}

func (h *Handler) disableEbsEncryptionByDefault(p *params) (response, error) {
	return h.setEncryptionByDefault(p, false)
}

func (h *Handler) setEncryptionByDefault(p *params, on bool) (response, error) {
	dry := p.boolean("DryRun")
	if p.err != nil {
		return nil, p.err
	}
	now, err := h.state.SetEncryptionByDefault(on, dry)
	if err != nil {
		return nil, err
	}
	return &encryptionByDefaultResponse{EncryptionByDefault: now}, nil
}

func (h *Handler) getEbsDefaultKmsKeyID(p *params) (response, error) {
	_, key, err := h.state.EBSEncryption(false)
	if err != nil {
		return nil, err
	}
	return &defaultKmsKeyResponse{KmsKeyID: key}, nil
}

func (h *Handler) modifyEbsDefaultKmsKeyID(p *params) (response, error) {
	key, dry := p.required("KmsKeyId"), p.boolean("DryRun")
	if p.err != nil {
		return nil, p.err
	}
	arn, err := h.state.SetDefaultKmsKey(key, dry)
	if err != nil {
		return nil, err
	}
	return &defaultKmsKeyResponse{KmsKeyID: arn}, nil
}

func (h *Handler) resetEbsDefaultKmsKeyID(p *params) (response, error) {
	dry := p.boolean("DryRun")
	if p.err != nil {
		return nil, p.err
	}
	arn, err := h.state.SetDefaultKmsKey("", dry)
	if err != nil {
		return nil, err
	}
	return &defaultKmsKeyResponse{KmsKeyID: arn}, nil
}
