package fakecloud_test

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

// completedSnapshot snapshots a new volume (holding data at off, when given) and waits for it.
func snapshotOfNewVolume(t *testing.T, env *fakecloudtest.Env, c *ec2.Client, in *ec2.CreateVolumeInput, off int64, n int) (string, []byte) {
	t.Helper()
	vol := availableVolume(t, c, in)
	var data []byte
	if n > 0 {
		data = fillRandom(t, env, vol, off, n)
	}
	out, err := c.CreateSnapshot(context.Background(), &ec2.CreateSnapshotInput{VolumeId: &vol})
	if err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, c, aws.ToString(out.SnapshotId), types.SnapshotStateCompleted)
	return aws.ToString(out.SnapshotId), data
}

func snapshotTags(sn types.Snapshot) map[string]string {
	out := map[string]string{}
	for _, tg := range sn.Tags {
		out[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
	}
	return out
}

var errorCode = regexp.MustCompile(`<Code>([^<]*)</Code>`)

// rawCode posts a request the SDKs refuse to send (a required parameter missing) and returns its error code.
func rawCode(t *testing.T, env *fakecloudtest.Env, body string) string {
	t.Helper()
	_, reply := post(t, env, body+"&Version=2016-11-15")
	if m := errorCode.FindStringSubmatch(reply); m != nil {
		return m[1]
	}
	return reply
}

// TestSnapshotActionsMissingParameters: required parameters the SDKs check themselves are checked by fakecloud
// too, for clients that do not.
func TestSnapshotActionsMissingParameters(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	for _, body := range []string{
		"Action=CopySnapshot&SourceRegion=us-east-1",
		"Action=CopySnapshot&SourceSnapshotId=snap-0123456789abcdef0",
		"Action=CreateSnapshots",
		"Action=ModifyEbsDefaultKmsKeyId",
		"Action=DescribeSnapshotAttribute&SnapshotId=snap-0123456789abcdef0",
		"Action=ResetSnapshotAttribute&Attribute=createVolumePermission",
		"Action=ModifySnapshotAttribute&CreateVolumePermission.Add.1.Group=all",
	} {
		if code := rawCode(t, env, body); code != "MissingParameter" {
			t.Errorf("%s: %s, want MissingParameter", body, code)
		}
	}
}

var keyARN = regexp.MustCompile(`^arn:aws:kms:us-east-1:\d{12}:key/[0-9a-f-]{36}$`)

// TestCopySnapshot: CopySnapshot within the region makes a new snapshot, pending then completed, holding the
// source's bytes (a volume restored from the copy reads them, after the source is gone), with its own
// description and tags, encrypted when asked (with the account's managed key's ARN, or the key named); the
// errors are EC2's, checked before DryRun.
func TestCopySnapshot(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	const off = 5 << 20
	src, data := snapshotOfNewVolume(t, env, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)}, off, 64<<10)
	encSrc, _ := snapshotOfNewVolume(t, env, c, &ec2.CreateVolumeInput{Size: aws.Int32(1), Encrypted: aws.Bool(true), KmsKeyId: aws.String("arn:aws:kms:us-east-1:123456789012:key/source")}, 0, 0)

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			in   ec2.CopySnapshotInput
			code string
		}{
			{"other region", ec2.CopySnapshotInput{SourceSnapshotId: &src, SourceRegion: aws.String("eu-west-1")}, "InvalidParameterValue"},
			{"unknown region", ec2.CopySnapshotInput{SourceSnapshotId: &src, SourceRegion: aws.String("xx-nowhere-9")}, "InvalidParameterValue"},
			{"malformed", ec2.CopySnapshotInput{SourceSnapshotId: aws.String("vol-1"), SourceRegion: aws.String("us-east-1")}, "InvalidSnapshotID.Malformed"},
			{"unknown", ec2.CopySnapshotInput{SourceSnapshotId: aws.String("snap-0123456789abcdef0"), SourceRegion: aws.String("us-east-1")}, "InvalidSnapshot.NotFound"},
			{"key without encryption", ec2.CopySnapshotInput{SourceSnapshotId: &src, SourceRegion: aws.String("us-east-1"), KmsKeyId: aws.String("k")}, "InvalidParameterDependency"},
			{"long description", ec2.CopySnapshotInput{SourceSnapshotId: &src, SourceRegion: aws.String("us-east-1"), Description: aws.String(strings.Repeat("d", 256))}, "InvalidParameterValue"},
			{"wrong tag type", ec2.CopySnapshotInput{SourceSnapshotId: &src, SourceRegion: aws.String("us-east-1"),
				TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: []types.Tag{{Key: aws.String("a"), Value: aws.String("b")}}}}}, "InvalidParameterValue"},
			{"dry run", ec2.CopySnapshotInput{SourceSnapshotId: &src, SourceRegion: aws.String("us-east-1"), DryRun: aws.Bool(true)}, "DryRunOperation"},
			{"dry run of a bad request", ec2.CopySnapshotInput{SourceSnapshotId: aws.String("snap-0123456789abcdef0"), SourceRegion: aws.String("us-east-1"), DryRun: aws.Bool(true)}, "InvalidSnapshot.NotFound"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := c.CopySnapshot(ctx, &tc.in)
				if got := codeOf(err); got != tc.code {
					t.Errorf("CopySnapshot: code %q (%v), want %q", got, err, tc.code)
				}
			})
		}
		all, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{})
		if err != nil || len(all.Snapshots) != 2 {
			t.Errorf("after refused copies: %d snapshots (%v), want the 2 sources", len(all.Snapshots), err)
		}
	})

	for _, tc := range []struct {
		name          string
		source        string
		encrypted     *bool
		key           *string
		wantEncrypted bool
		wantKey       func(string) bool
	}{
		{"plain", src, nil, nil, false, func(k string) bool { return k == "" }},
		{"encrypted with the default key", src, aws.Bool(true), nil, true, keyARN.MatchString},
		{"encrypted with a key", src, aws.Bool(true), aws.String("1234abcd-12ab-34cd-56ef-1234567890ab"), true,
			func(k string) bool {
				return strings.HasSuffix(k, ":key/1234abcd-12ab-34cd-56ef-1234567890ab") && strings.HasPrefix(k, "arn:aws:kms:us-east-1:")
			}},
		{"encrypted source keeps its key", encSrc, nil, nil, true, func(k string) bool { return k == "arn:aws:kms:us-east-1:123456789012:key/source" }},
		{"encrypted source re-encrypted", encSrc, aws.Bool(true), aws.String("arn:aws:kms:us-east-1:123456789012:key/other"), true,
			func(k string) bool { return k == "arn:aws:kms:us-east-1:123456789012:key/other" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.CopySnapshot(ctx, &ec2.CopySnapshotInput{SourceSnapshotId: &tc.source, SourceRegion: aws.String("us-east-1"),
				Description: aws.String("copy of " + tc.source), Encrypted: tc.encrypted, KmsKeyId: tc.key,
				TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeSnapshot, Tags: []types.Tag{{Key: aws.String("copy"), Value: aws.String("yes")}}}}})
			if err != nil {
				t.Fatal(err)
			}
			id := aws.ToString(out.SnapshotId)
			if len(out.Tags) != 1 || aws.ToString(out.Tags[0].Key) != "copy" {
				t.Errorf("reply tags %v", out.Tags)
			}
			sn := waitSnapshot(t, c, id, types.SnapshotStateCompleted)
			if aws.ToString(sn.Description) != "copy of "+tc.source || snapshotTags(sn)["copy"] != "yes" || aws.ToInt32(sn.VolumeSize) != 1 ||
				aws.ToString(sn.VolumeId) != "vol-ffffffff" {
				t.Errorf("copy: description %q tags %v size %d volume %q", aws.ToString(sn.Description), snapshotTags(sn), aws.ToInt32(sn.VolumeSize), aws.ToString(sn.VolumeId))
			}
			if aws.ToBool(sn.Encrypted) != tc.wantEncrypted || !tc.wantKey(aws.ToString(sn.KmsKeyId)) {
				t.Errorf("copy: encrypted %v key %q", aws.ToBool(sn.Encrypted), aws.ToString(sn.KmsKeyId))
			}
		})
	}

	t.Run("data outlives the source", func(t *testing.T) {
		out, err := c.CopySnapshot(ctx, &ec2.CopySnapshotInput{SourceSnapshotId: &src, SourceRegion: aws.String("us-east-1")})
		if err != nil {
			t.Fatal(err)
		}
		id := aws.ToString(out.SnapshotId)
		waitSnapshot(t, c, id, types.SnapshotStateCompleted)
		if _, err := c.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: &src}); err != nil {
			t.Fatal(err)
		}
		checkSnapshotFile(t, env.DataDir, id, 1, off, data)
		vol := availableVolume(t, c, &ec2.CreateVolumeInput{SnapshotId: &id})
		got := make([]byte, len(data))
		f, err := os.Open(env.Server.Backend.VolumeFile(vol))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.ReadAt(got, off); err != nil || !bytes.Equal(got, data) {
			t.Errorf("volume restored from the copy does not hold the source's bytes (%v)", err)
		}
		if _, err := c.CopySnapshot(ctx, &ec2.CopySnapshotInput{SourceSnapshotId: &src, SourceRegion: aws.String("us-east-1")}); codeOf(err) != "InvalidSnapshot.NotFound" {
			t.Errorf("copy of a deleted snapshot: %v", err)
		}
	})
}

// TestCopySnapshotOfPendingSnapshot: a snapshot still pending cannot be copied (IncorrectState).
func TestCopySnapshotOfPendingSnapshot(t *testing.T) {
	hooks := &hookedBackend{copies: newGate(t)}
	env := fakecloudtest.Start(t, fakecloudtest.Options{WrapBackend: hooks.wrap})
	c := env.EC2(t)
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
	out, err := c.CreateSnapshot(context.Background(), &ec2.CreateSnapshotInput{VolumeId: &vol})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CopySnapshot(context.Background(), &ec2.CopySnapshotInput{SourceSnapshotId: out.SnapshotId, SourceRegion: aws.String("us-east-1")})
	if codeOf(err) != "IncorrectState" {
		t.Errorf("copy of a pending snapshot: %v, want IncorrectState", err)
	}
}

func permissionsOf(t *testing.T, c *ec2.Client, id string) (users []string, public bool) {
	t.Helper()
	out, err := c.DescribeSnapshotAttribute(context.Background(), &ec2.DescribeSnapshotAttributeInput{SnapshotId: &id, Attribute: types.SnapshotAttributeNameCreateVolumePermission})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(out.SnapshotId) != id {
		t.Errorf("DescribeSnapshotAttribute: snapshotId %q", aws.ToString(out.SnapshotId))
	}
	for _, p := range out.CreateVolumePermissions {
		if p.Group == types.PermissionGroupAll {
			public = true
		}
		if p.UserId != nil {
			users = append(users, *p.UserId)
		}
	}
	slices.Sort(users)
	return users, public
}

func restorableBy(t *testing.T, c *ec2.Client, who ...string) []string {
	t.Helper()
	out, err := c.DescribeSnapshots(context.Background(), &ec2.DescribeSnapshotsInput{RestorableByUserIds: who})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sn := range out.Snapshots {
		ids = append(ids, aws.ToString(sn.SnapshotId))
	}
	slices.Sort(ids)
	return ids
}

// TestSnapshotAttributes: createVolumePermission shares a snapshot with accounts and the group all, in either
// request form EC2 has; Describe shows it, DescribeSnapshots' RestorableBy selects by it, Reset clears it, and
// the refusals are EC2's (encrypted snapshots are never public; with the AWS managed key never shared).
func TestSnapshotAttributes(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: t.TempDir()})
	c := env.EC2(t)
	ctx := context.Background()
	plain, _ := snapshotOfNewVolume(t, env, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)}, 0, 0)
	other, _ := snapshotOfNewVolume(t, env, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)}, 0, 0)
	managed, _ := snapshotOfNewVolume(t, env, c, &ec2.CreateVolumeInput{Size: aws.Int32(1), Encrypted: aws.Bool(true)}, 0, 0)
	custom, _ := snapshotOfNewVolume(t, env, c, &ec2.CreateVolumeInput{Size: aws.Int32(1), Encrypted: aws.Bool(true), KmsKeyId: aws.String("arn:aws:kms:us-east-1:123456789012:key/mine")}, 0, 0)
	const friend, stranger = "111122223333", "444455556666"

	if users, public := permissionsOf(t, c, plain); len(users) != 0 || public {
		t.Fatalf("new snapshot shared: %v public %v", users, public)
	}
	if _, err := c.ModifySnapshotAttribute(ctx, &ec2.ModifySnapshotAttributeInput{SnapshotId: &plain,
		CreateVolumePermission: &types.CreateVolumePermissionModifications{Add: []types.CreateVolumePermission{{UserId: aws.String(friend)}, {Group: types.PermissionGroupAll}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ModifySnapshotAttribute(ctx, &ec2.ModifySnapshotAttributeInput{SnapshotId: &custom, Attribute: types.SnapshotAttributeNameCreateVolumePermission,
		OperationType: types.OperationTypeAdd, UserIds: []string{friend, stranger}}); err != nil {
		t.Fatal(err)
	}
	if users, public := permissionsOf(t, c, plain); !slices.Equal(users, []string{friend}) || !public {
		t.Errorf("shared snapshot: %v public %v", users, public)
	}
	if users, public := permissionsOf(t, c, custom); !slices.Equal(users, []string{friend, stranger}) || public {
		t.Errorf("snapshot shared by the UserId form: %v public %v", users, public)
	}
	mine := []string{plain, other, managed, custom}
	slices.Sort(mine)
	for _, tc := range []struct {
		who  []string
		want []string
	}{
		{[]string{"self"}, mine},
		{[]string{env.Server.State.AccountID()}, mine},
		{[]string{"all"}, []string{plain}},
		{[]string{friend}, sorted(plain, custom)},
		{[]string{stranger}, sorted(plain, custom)},
		{[]string{"999988887777"}, []string{plain}},
	} {
		if got := restorableBy(t, c, tc.who...); !slices.Equal(got, tc.want) {
			t.Errorf("RestorableBy %v: %v, want %v", tc.who, got, tc.want)
		}
	}
	if _, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{RestorableByUserIds: []string{"nobody"}}); codeOf(err) != "InvalidParameterValue" {
		t.Errorf("RestorableBy nobody: %v", err)
	}

	if _, err := c.ModifySnapshotAttribute(ctx, &ec2.ModifySnapshotAttributeInput{SnapshotId: &custom, OperationType: types.OperationTypeRemove, UserIds: []string{stranger}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ModifySnapshotAttribute(ctx, &ec2.ModifySnapshotAttributeInput{SnapshotId: &plain,
		CreateVolumePermission: &types.CreateVolumePermissionModifications{Remove: []types.CreateVolumePermission{{Group: types.PermissionGroupAll}}}}); err != nil {
		t.Fatal(err)
	}
	if users, public := permissionsOf(t, c, custom); !slices.Equal(users, []string{friend}) || public {
		t.Errorf("after removing the stranger: %v public %v", users, public)
	}
	if users, public := permissionsOf(t, c, plain); !slices.Equal(users, []string{friend}) || public {
		t.Errorf("after removing all: %v public %v", users, public)
	}

	t.Run("errors", func(t *testing.T) {
		addAll := &types.CreateVolumePermissionModifications{Add: []types.CreateVolumePermission{{Group: types.PermissionGroupAll}}}
		addFriend := &types.CreateVolumePermissionModifications{Add: []types.CreateVolumePermission{{UserId: aws.String(friend)}}}
		for _, tc := range []struct {
			name string
			in   ec2.ModifySnapshotAttributeInput
			code string
		}{
			{"encrypted made public", ec2.ModifySnapshotAttributeInput{SnapshotId: &custom, CreateVolumePermission: addAll}, "UnsupportedOperation"},
			{"managed key shared", ec2.ModifySnapshotAttributeInput{SnapshotId: &managed, CreateVolumePermission: addFriend}, "InvalidParameter"},
			{"add and remove", ec2.ModifySnapshotAttributeInput{SnapshotId: &plain, CreateVolumePermission: &types.CreateVolumePermissionModifications{
				Add: []types.CreateVolumePermission{{UserId: aws.String(friend)}}, Remove: []types.CreateVolumePermission{{UserId: aws.String(stranger)}}}}, "InvalidParameterCombination"},
			{"nothing", ec2.ModifySnapshotAttributeInput{SnapshotId: &plain}, "MissingParameter"},
			{"bad account", ec2.ModifySnapshotAttributeInput{SnapshotId: &plain, OperationType: types.OperationTypeAdd, UserIds: []string{"12"}}, "InvalidParameterValue"},
			{"bad group", ec2.ModifySnapshotAttributeInput{SnapshotId: &plain, OperationType: types.OperationTypeAdd, GroupNames: []string{"friends"}}, "InvalidParameterValue"},
			{"no operation type", ec2.ModifySnapshotAttributeInput{SnapshotId: &plain, UserIds: []string{friend}}, "MissingParameter"},
			{"bad operation type", ec2.ModifySnapshotAttributeInput{SnapshotId: &plain, OperationType: "share", UserIds: []string{friend}}, "InvalidParameterValue"},
			{"product codes", ec2.ModifySnapshotAttributeInput{SnapshotId: &plain, Attribute: types.SnapshotAttributeNameProductCodes, CreateVolumePermission: addFriend}, "InvalidParameterValue"},
			{"bad attribute", ec2.ModifySnapshotAttributeInput{SnapshotId: &plain, Attribute: "size", CreateVolumePermission: addFriend}, "InvalidParameterValue"},
			{"unknown", ec2.ModifySnapshotAttributeInput{SnapshotId: aws.String("snap-0123456789abcdef0"), CreateVolumePermission: addFriend}, "InvalidSnapshot.NotFound"},
			{"malformed", ec2.ModifySnapshotAttributeInput{SnapshotId: aws.String("snapshot"), CreateVolumePermission: addFriend}, "InvalidSnapshotID.Malformed"},
			{"dry run", ec2.ModifySnapshotAttributeInput{SnapshotId: &other, CreateVolumePermission: addFriend, DryRun: aws.Bool(true)}, "DryRunOperation"},
			{"dry run of a refused change", ec2.ModifySnapshotAttributeInput{SnapshotId: &custom, CreateVolumePermission: addAll, DryRun: aws.Bool(true)}, "UnsupportedOperation"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := c.ModifySnapshotAttribute(ctx, &tc.in)
				if got := codeOf(err); got != tc.code {
					t.Errorf("ModifySnapshotAttribute: code %q (%v), want %q", got, err, tc.code)
				}
			})
		}
		if users, public := permissionsOf(t, c, other); len(users) != 0 || public {
			t.Errorf("a dry run shared the snapshot: %v %v", users, public)
		}
		for _, tc := range []struct {
			name string
			in   ec2.DescribeSnapshotAttributeInput
			code string
		}{
			{"bad attribute", ec2.DescribeSnapshotAttributeInput{SnapshotId: &plain, Attribute: "size"}, "InvalidParameterValue"},
			{"unknown", ec2.DescribeSnapshotAttributeInput{SnapshotId: aws.String("snap-0123456789abcdef0"), Attribute: types.SnapshotAttributeNameCreateVolumePermission}, "InvalidSnapshot.NotFound"},
			{"dry run", ec2.DescribeSnapshotAttributeInput{SnapshotId: &plain, Attribute: types.SnapshotAttributeNameCreateVolumePermission, DryRun: aws.Bool(true)}, "DryRunOperation"},
		} {
			t.Run("describe "+tc.name, func(t *testing.T) {
				_, err := c.DescribeSnapshotAttribute(ctx, &tc.in)
				if got := codeOf(err); got != tc.code {
					t.Errorf("DescribeSnapshotAttribute: code %q (%v), want %q", got, err, tc.code)
				}
			})
		}
		if _, err := c.ResetSnapshotAttribute(ctx, &ec2.ResetSnapshotAttributeInput{SnapshotId: &plain, Attribute: types.SnapshotAttributeNameCreateVolumePermission, DryRun: aws.Bool(true)}); codeOf(err) != "DryRunOperation" {
			t.Errorf("dry-run reset: %v", err)
		}
	})

	pc, err := c.DescribeSnapshotAttribute(ctx, &ec2.DescribeSnapshotAttributeInput{SnapshotId: &plain, Attribute: types.SnapshotAttributeNameProductCodes})
	if err != nil || len(pc.ProductCodes) != 0 || len(pc.CreateVolumePermissions) != 0 {
		t.Errorf("productCodes: %+v (%v)", pc, err)
	}

	// Kept across a restart.
	env.Close()
	env = fakecloudtest.Start(t, fakecloudtest.Options{DataDir: env.DataDir})
	c = env.EC2(t)
	if users, _ := permissionsOf(t, c, plain); !slices.Equal(users, []string{friend}) {
		t.Errorf("after a restart: %v", users)
	}
	if _, err := c.ResetSnapshotAttribute(ctx, &ec2.ResetSnapshotAttributeInput{SnapshotId: &plain, Attribute: types.SnapshotAttributeNameCreateVolumePermission}); err != nil {
		t.Fatal(err)
	}
	if users, public := permissionsOf(t, c, plain); len(users) != 0 || public {
		t.Errorf("after reset: %v public %v", users, public)
	}
}

func sorted(ids ...string) []string {
	slices.Sort(ids)
	return ids
}

// TestEncryptionByDefault: the account's encryption by default and default KMS key, as EC2 has them: off and
// the AWS managed key (an ARN, stable for the account) at first; on, a new volume is encrypted with the
// default key, as its snapshots are; a changed default key is used and reported as an ARN; kept across a
// restart; reset and disable go back.
func TestEncryptionByDefault(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: t.TempDir()})
	c := env.EC2(t)
	ctx := context.Background()
	get := func() (bool, string) {
		t.Helper()
		on, err := c.GetEbsEncryptionByDefault(ctx, &ec2.GetEbsEncryptionByDefaultInput{})
		if err != nil {
			t.Fatal(err)
		}
		key, err := c.GetEbsDefaultKmsKeyId(ctx, &ec2.GetEbsDefaultKmsKeyIdInput{})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToBool(on.EbsEncryptionByDefault), aws.ToString(key.KmsKeyId)
	}
	on, managed := get()
	if on || !keyARN.MatchString(managed) {
		t.Fatalf("at first: encryption by default %v, default key %q", on, managed)
	}
	v := describeVolume(t, c, availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1), Encrypted: aws.Bool(true)}))
	if aws.ToString(v.KmsKeyId) != managed {
		t.Errorf("encrypted volume without a key: %q, want the managed key %q", aws.ToString(v.KmsKeyId), managed)
	}
	if v := describeVolume(t, c, availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})); aws.ToBool(v.Encrypted) {
		t.Error("a volume is encrypted with encryption by default off")
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"enable", func() error {
			_, err := c.EnableEbsEncryptionByDefault(ctx, &ec2.EnableEbsEncryptionByDefaultInput{DryRun: aws.Bool(true)})
			return err
		}},
		{"disable", func() error {
			_, err := c.DisableEbsEncryptionByDefault(ctx, &ec2.DisableEbsEncryptionByDefaultInput{DryRun: aws.Bool(true)})
			return err
		}},
		{"get", func() error {
			_, err := c.GetEbsEncryptionByDefault(ctx, &ec2.GetEbsEncryptionByDefaultInput{DryRun: aws.Bool(true)})
			return err
		}},
		{"get key", func() error {
			_, err := c.GetEbsDefaultKmsKeyId(ctx, &ec2.GetEbsDefaultKmsKeyIdInput{DryRun: aws.Bool(true)})
			return err
		}},
		{"modify key", func() error {
			_, err := c.ModifyEbsDefaultKmsKeyId(ctx, &ec2.ModifyEbsDefaultKmsKeyIdInput{KmsKeyId: aws.String("alias/mine"), DryRun: aws.Bool(true)})
			return err
		}},
		{"reset key", func() error {
			_, err := c.ResetEbsDefaultKmsKeyId(ctx, &ec2.ResetEbsDefaultKmsKeyIdInput{DryRun: aws.Bool(true)})
			return err
		}},
	} {
		if err := tc.call(); codeOf(err) != "DryRunOperation" {
			t.Errorf("dry-run %s: %v", tc.name, err)
		}
	}
	if on, key := get(); on || key != managed {
		t.Fatalf("dry runs changed the settings: %v %q", on, key)
	}
	if _, err := c.ModifyEbsDefaultKmsKeyId(ctx, &ec2.ModifyEbsDefaultKmsKeyIdInput{KmsKeyId: aws.String(strings.Repeat("k", 2049))}); codeOf(err) != "InvalidParameterValue" {
		t.Errorf("ModifyEbsDefaultKmsKeyId with a huge key: %v", err)
	}

	en, err := c.EnableEbsEncryptionByDefault(ctx, &ec2.EnableEbsEncryptionByDefaultInput{})
	if err != nil || !aws.ToBool(en.EbsEncryptionByDefault) {
		t.Fatalf("enable: %+v %v", en, err)
	}
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
	if v := describeVolume(t, c, vol); !aws.ToBool(v.Encrypted) || aws.ToString(v.KmsKeyId) != managed {
		t.Errorf("volume with encryption by default: encrypted %v key %q", aws.ToBool(v.Encrypted), aws.ToString(v.KmsKeyId))
	}
	snap, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &vol})
	if err != nil || !aws.ToBool(snap.Encrypted) || aws.ToString(snap.KmsKeyId) != managed {
		t.Errorf("snapshot of it: %+v %v", snap, err)
	}
	const keyID = "1234abcd-12ab-34cd-56ef-1234567890ab"
	mod, err := c.ModifyEbsDefaultKmsKeyId(ctx, &ec2.ModifyEbsDefaultKmsKeyIdInput{KmsKeyId: aws.String(keyID)})
	wantKey := "arn:aws:kms:us-east-1:" + env.Server.State.AccountID() + ":key/" + keyID
	if err != nil || aws.ToString(mod.KmsKeyId) != wantKey {
		t.Fatalf("ModifyEbsDefaultKmsKeyId: %q %v, want %q", aws.ToString(mod.KmsKeyId), err, wantKey)
	}
	if v := describeVolume(t, c, availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})); aws.ToString(v.KmsKeyId) != wantKey {
		t.Errorf("volume after the key changed: %q", aws.ToString(v.KmsKeyId))
	}
	if v := describeVolume(t, c, availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1), KmsKeyId: aws.String("alias/aws/ebs")})); aws.ToString(v.KmsKeyId) != managed {
		t.Errorf("volume naming alias/aws/ebs: %q, want %q", aws.ToString(v.KmsKeyId), managed)
	}

	env.Close()
	env = fakecloudtest.Start(t, fakecloudtest.Options{DataDir: env.DataDir})
	c = env.EC2(t)
	if on, key := get(); !on || key != wantKey {
		t.Errorf("after a restart: encryption by default %v key %q", on, key)
	}
	if _, m := get(); m == managed {
		t.Error("the changed key was lost")
	}
	reset, err := c.ResetEbsDefaultKmsKeyId(ctx, &ec2.ResetEbsDefaultKmsKeyIdInput{})
	if err != nil || aws.ToString(reset.KmsKeyId) != managed {
		t.Errorf("reset: %q %v, want the same managed key %q", aws.ToString(reset.KmsKeyId), err, managed)
	}
	dis, err := c.DisableEbsEncryptionByDefault(ctx, &ec2.DisableEbsEncryptionByDefaultInput{})
	if err != nil || aws.ToBool(dis.EbsEncryptionByDefault) {
		t.Fatalf("disable: %+v %v", dis, err)
	}
	if v := describeVolume(t, c, availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})); aws.ToBool(v.Encrypted) {
		t.Error("a volume is encrypted after encryption by default was disabled")
	}
}

// TestCreateSnapshots: CreateSnapshots snapshots each volume attached to the instance but those excluded, with
// the request's tags and, with CopyTagsFromSource=volume, the volume's; errors are EC2's, before DryRun.
func TestCreateSnapshots(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	tag := func(k, v string) []types.TagSpecification {
		return []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: []types.Tag{{Key: aws.String(k), Value: aws.String(v)}}}}
	}
	a := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1), TagSpecifications: tag("Name", "a")})
	b := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(2), TagSpecifications: tag("Name", "b")})
	excluded := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
	availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)}) // detached: not in the set
	attached(t, c, a, fakecloudtest.InstanceA, "/dev/xvdba")
	attached(t, c, b, fakecloudtest.InstanceA, "/dev/xvdbb")
	attached(t, c, excluded, fakecloudtest.InstanceA, "/dev/xvdbc")
	spec := &types.InstanceSpecification{InstanceId: aws.String(fakecloudtest.InstanceA), ExcludeBootVolume: aws.Bool(true), ExcludeDataVolumeIds: []string{excluded}}

	for _, tc := range []struct {
		name string
		in   ec2.CreateSnapshotsInput
		code string
	}{
		{"unknown instance", ec2.CreateSnapshotsInput{InstanceSpecification: &types.InstanceSpecification{InstanceId: aws.String("i-0123456789abcdef0")}}, "InvalidInstanceID.NotFound"},
		{"malformed instance", ec2.CreateSnapshotsInput{InstanceSpecification: &types.InstanceSpecification{InstanceId: aws.String("vol-1")}}, "InvalidInstanceID.Malformed"},
		{"malformed exclusion", ec2.CreateSnapshotsInput{InstanceSpecification: &types.InstanceSpecification{InstanceId: aws.String(fakecloudtest.InstanceA), ExcludeDataVolumeIds: []string{"snap-1"}}}, "InvalidVolumeID.Malformed"},
		{"bad copy tags", ec2.CreateSnapshotsInput{InstanceSpecification: spec, CopyTagsFromSource: "instance"}, "InvalidParameterValue"},
		{"long description", ec2.CreateSnapshotsInput{InstanceSpecification: spec, Description: aws.String(strings.Repeat("d", 256))}, "InvalidParameterValue"},
		{"dry run", ec2.CreateSnapshotsInput{InstanceSpecification: spec, DryRun: aws.Bool(true)}, "DryRunOperation"},
		{"dry run of a bad request", ec2.CreateSnapshotsInput{InstanceSpecification: &types.InstanceSpecification{InstanceId: aws.String("i-0123456789abcdef0")}, DryRun: aws.Bool(true)}, "InvalidInstanceID.NotFound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CreateSnapshots(ctx, &tc.in)
			if got := codeOf(err); got != tc.code {
				t.Errorf("CreateSnapshots: code %q (%v), want %q", got, err, tc.code)
			}
		})
	}
	if all, _ := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{}); len(all.Snapshots) != 0 {
		t.Fatalf("refused requests made %d snapshots", len(all.Snapshots))
	}

	out, err := c.CreateSnapshots(ctx, &ec2.CreateSnapshotsInput{InstanceSpecification: spec, Description: aws.String("set"),
		CopyTagsFromSource: types.CopyTagsFromSourceVolume,
		TagSpecifications:  []types.TagSpecification{{ResourceType: types.ResourceTypeSnapshot, Tags: []types.Tag{{Key: aws.String("set"), Value: aws.String("1")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]types.SnapshotInfo{}
	for _, sn := range out.Snapshots {
		got[aws.ToString(sn.VolumeId)] = sn
	}
	if len(got) != 2 || got[a].SnapshotId == nil || got[b].SnapshotId == nil {
		t.Fatalf("CreateSnapshots made snapshots %+v, want one of %s and one of %s", out.Snapshots, a, b)
	}
	for vol, name := range map[string]string{a: "a", b: "b"} {
		sn := waitSnapshot(t, c, aws.ToString(got[vol].SnapshotId), types.SnapshotStateCompleted)
		if tags := snapshotTags(sn); tags["Name"] != name || tags["set"] != "1" || aws.ToString(sn.Description) != "set" {
			t.Errorf("snapshot of %s: tags %v description %q", vol, tags, aws.ToString(sn.Description))
		}
	}
	if aws.ToInt32(got[b].VolumeSize) != 2 || got[a].State != types.SnapshotStatePending && got[a].State != types.SnapshotStateCompleted {
		t.Errorf("reply: %+v", got[b])
	}
	plain, err := c.CreateSnapshots(ctx, &ec2.CreateSnapshotsInput{InstanceSpecification: &types.InstanceSpecification{InstanceId: aws.String(fakecloudtest.InstanceA)}})
	if err != nil || len(plain.Snapshots) != 3 {
		t.Fatalf("CreateSnapshots of all: %d snapshots (%v), want 3", len(plain.Snapshots), err)
	}
	for _, sn := range plain.Snapshots {
		if len(sn.Tags) != 0 {
			t.Errorf("snapshot without CopyTagsFromSource has tags %v", sn.Tags)
		}
	}
	none, err := c.CreateSnapshots(ctx, &ec2.CreateSnapshotsInput{InstanceSpecification: &types.InstanceSpecification{InstanceId: aws.String(fakecloudtest.InstanceB)}})
	if err != nil || len(none.Snapshots) != 0 {
		t.Errorf("CreateSnapshots of an instance without volumes: %v %v", none, err)
	}
}
