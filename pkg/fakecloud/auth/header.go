package auth

import (
	"fmt"
	"strings"
)

const algorithm = "AWS4-HMAC-SHA256"

// authorization is a parsed SigV4 Authorization header:
//
//	AWS4-HMAC-SHA256 Credential=AKID/20261130/us-east-1/ec2/aws4_request, SignedHeaders=host;x-amz-date, Signature=…
type authorization struct {
	accessKeyID   string
	date          string // yyyymmdd from the credential scope
	region        string
	service       string
	signedHeaders []string
	signature     string
}

func parseAuthorization(h string) (authorization, error) {
	alg, rest, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || alg != algorithm {
		return authorization{}, fmt.Errorf("unsupported authorization scheme %q", alg)
	}
	fields := map[string]string{}
	for part := range strings.SplitSeq(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return authorization{}, fmt.Errorf("malformed authorization field %q", part)
		}
		fields[k] = v
	}
	var a authorization
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[0] == "" || scope[4] != "aws4_request" {
		return authorization{}, fmt.Errorf("malformed credential %q", fields["Credential"])
	}
	a.accessKeyID, a.date, a.region, a.service = scope[0], scope[1], scope[2], scope[3]
	if fields["SignedHeaders"] == "" {
		return authorization{}, fmt.Errorf("missing SignedHeaders")
	}
	a.signedHeaders = strings.Split(fields["SignedHeaders"], ";")
	if a.signature = fields["Signature"]; a.signature == "" {
		return authorization{}, fmt.Errorf("missing Signature")
	}
	return a, nil
}
