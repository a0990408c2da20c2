package server

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"sync"
	"time"
)

// jwks caches the RSA keys served at a JWKS URL. An unknown key id fetches
// the set again, at most once per minRefresh, so rotated keys are picked up
// and unknown ids cannot make the server hammer the issuer.
type jwks struct {
	url    string
	client *http.Client

	mu      sync.Mutex
	keys    map[string]*rsa.PublicKey
	fetched time.Time
}

const (
	jwksMinRefresh = 30 * time.Second
	jwksMaxAge     = 10 * time.Minute
	jwksMaxBytes   = 1 << 20
)

func newJWKS(url string, client *http.Client) *jwks {
	return &jwks{url: url, client: client}
}

func (j *jwks) key(ctx context.Context, kid string) (*rsa.PublicKey, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if k, ok := j.lookup(kid); ok && time.Since(j.fetched) < jwksMaxAge {
		return k, nil
	}
	if j.keys == nil || time.Since(j.fetched) >= jwksMinRefresh {
		if err := j.fetch(ctx); err != nil {
			if k, ok := j.lookup(kid); ok {
				return k, nil // keep using a cached key while the issuer is unreachable
			}
			return nil, err
		}
	}
	if k, ok := j.lookup(kid); ok {
		return k, nil
	}
	return nil, fmt.Errorf("no key with id %q in the JWKS", kid)
}

// lookup finds a key by id; a token without kid matches a set of one key.
func (j *jwks) lookup(kid string) (*rsa.PublicKey, bool) {
	if kid == "" && len(j.keys) == 1 {
		for _, k := range j.keys {
			return k, true
		}
	}
	k, ok := j.keys[kid]
	return k, ok
}

func (j *jwks) fetch(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.url, nil)
	if err != nil {
		return fmt.Errorf("jwks: %w", err)
	}
	resp, err := j.client.Do(req)
	if err != nil {
		return fmt.Errorf("jwks: fetch: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("jwks: fetch: status %d", resp.StatusCode)
	}
	var set struct {
		Keys []struct {
			Kty string `json:"kty"`
			Kid string `json:"kid"`
			Use string `json:"use"`
			N   string `json:"n"`
			E   string `json:"e"`
		} `json:"keys"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, jwksMaxBytes)).Decode(&set); err != nil {
		return fmt.Errorf("jwks: decode: %w", err)
	}
	keys := map[string]*rsa.PublicKey{}
	for _, k := range set.Keys {
		if k.Kty != "RSA" || (k.Use != "" && k.Use != "sig") {
			continue
		}
		n, err1 := base64.RawURLEncoding.DecodeString(k.N)
		e, err2 := base64.RawURLEncoding.DecodeString(k.E)
		if err := errors.Join(err1, err2); err != nil || len(e) == 0 || len(e) > 4 {
			continue
		}
		exp := 0
		for _, b := range e {
			exp = exp<<8 | int(b)
		}
		keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: exp}
	}
	j.keys, j.fetched = keys, time.Now()
	return nil
}
