package state

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// kindSettings holds the account's EBS settings in the region, one record (settingsEBS).
const (
	kindSettings = "settings"
	settingsEBS  = "ebs"
)

// EBSSettings are the account's EBS encryption settings in the region: encryption by default, and the KMS key
// used when a request names none ("" is the AWS managed key, alias/aws/ebs).
type EBSSettings struct {
	EncryptionByDefault bool   `json:"encryptionByDefault,omitempty"`
	DefaultKmsKeyID     string `json:"defaultKmsKeyId,omitempty"`
}

// managedKeyAlias is the alias of the AWS managed key for EBS.
const managedKeyAlias = "alias/aws/ebs"

// managedKeyNamespace derives the AWS managed key's ID from the account and region, so it is stable per account
// and region without being stored, as the real key is.
var managedKeyNamespace = uuid.MustParse("5b0b5a4e-9f0e-4c1d-8a55-2d1f7e0c9e11")

// ManagedKeyARN is the ARN of the account's AWS managed key for EBS in the region (alias/aws/ebs).
func (s *State) ManagedKeyARN() string {
	id := uuid.NewSHA1(managedKeyNamespace, []byte(s.cfg.AccountID+"/"+s.cfg.Region))
	return s.kmsARN("key/" + id.String())
}

func (s *State) kmsARN(resource string) string {
	return fmt.Sprintf("arn:aws:kms:%s:%s:%s", s.cfg.Region, s.cfg.AccountID, resource)
}

// kmsKeyARN names a KMS key as EC2 reports it: a key ID becomes its key ARN, an alias its alias ARN (the AWS
// managed key's alias its key ARN), an ARN stays. "" is the account's default key.
func (s *State) kmsKeyARN(key string) string {
	switch {
	case key == "":
		if s.ebs.DefaultKmsKeyID != "" {
			return s.ebs.DefaultKmsKeyID
		}
		return s.ManagedKeyARN()
	case key == managedKeyAlias || key == s.kmsARN(managedKeyAlias):
		return s.ManagedKeyARN()
	case strings.HasPrefix(key, "arn:"):
		return key
	case strings.HasPrefix(key, "alias/"):
		return s.kmsARN(key)
	}
	return s.kmsARN("key/" + key)
}

// checkKmsKeyID bounds a KMS key's name, as KMS does. KMS checks the key itself asynchronously on EC2 (a
// request naming a key that does not exist is accepted), so fakecloud, which has no KMS, accepts any.
func checkKmsKeyID(key string) error {
	if utf8.RuneCountInString(key) > maxKmsKeyID {
		return ec2err.InvalidValue("kmsKeyId", key, fmt.Sprintf("A KMS key must be named in at most %d characters.", maxKmsKeyID))
	}
	return nil
}

// encryption settles a new volume's or snapshot's encryption: encrypted when asked, when its source is, or when
// encryption by default is on; its key the one asked, else the source's, else the account's default.
func (s *State) encryption(asked bool, key string, srcEncrypted bool, srcKey string) (bool, string) {
	if !asked && !srcEncrypted && !s.ebs.EncryptionByDefault {
		return false, ""
	}
	switch {
	case key != "":
		return true, s.kmsKeyARN(key)
	case srcEncrypted && srcKey != "":
		return true, srcKey
	}
	return true, s.kmsKeyARN("")
}

// EBSEncryption returns the account's EBS encryption settings, the default key as its ARN.
func (s *State) EBSEncryption(dryRun bool) (bool, string, error) {
	if dryRun {
		return false, "", ec2err.DryRun()
	}
	var on bool
	var key string
	s.read(func(time.Time) { on, key = s.ebs.EncryptionByDefault, s.kmsKeyARN("") })
	return on, key, nil
}

// SetEncryptionByDefault turns encryption by default on or off; it says the setting now.
func (s *State) SetEncryptionByDefault(on, dryRun bool) (bool, error) {
	err := s.mutate(func(time.Time) error {
		if dryRun {
			return ec2err.DryRun()
		}
		s.ebs.EncryptionByDefault = on
		s.markDirty(kindSettings, settingsEBS)
		return nil
	})
	return on, err
}

// SetDefaultKmsKey makes key the default KMS key ("" resets it to the AWS managed key); it returns the
// default key's ARN now.
func (s *State) SetDefaultKmsKey(key string, dryRun bool) (string, error) {
	var arn string
	err := s.mutate(func(time.Time) error {
		if err := checkKmsKeyID(key); err != nil {
			return err
		}
		if dryRun {
			return ec2err.DryRun()
		}
		s.ebs.DefaultKmsKeyID = ""
		if key != "" {
			if resolved := s.kmsKeyARN(key); resolved != s.ManagedKeyARN() {
				s.ebs.DefaultKmsKeyID = resolved
			}
		}
		s.markDirty(kindSettings, settingsEBS)
		arn = s.kmsKeyARN("")
		return nil
	})
	return arn, err
}

// loadSettings reads the settings record; a store from before settings existed has none.
func (s *State) loadSettings(id string, raw []byte) error {
	if id != settingsEBS {
		return nil
	}
	return json.Unmarshal(raw, &s.ebs)
}
