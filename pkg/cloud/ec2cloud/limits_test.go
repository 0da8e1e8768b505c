package ec2cloud

import "testing"

func TestAttachmentLimit(t *testing.T) {
	cases := map[string]int{"m5.large": 26, "t2.micro": 39, "m4.xlarge": 39, "c7g.medium": 26, "": 26, "x1e.32xlarge": 39}
	for typ, want := range cases {
		if got := attachmentLimit(typ); got != want {
			t.Errorf("attachmentLimit(%q) = %d, want %d", typ, got, want)
		}
	}
}
