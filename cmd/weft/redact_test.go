package main

import (
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"
)

// fakePostgres serves the start of the PostgreSQL protocol on a loopback
// port: it asks for a cleartext password and refuses it with an error that
// quotes it back, as a careless server or proxy might. It returns the
// address.
func fakePostgres(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go refusePassword(c)
		}
	}()
	return ln.Addr().String()
}

func refusePassword(c net.Conn) {
	defer c.Close()
	be := pgproto3.NewBackend(c, c)
	for {
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			return
		}
		if _, ok := msg.(*pgproto3.SSLRequest); ok {
			if _, err := c.Write([]byte("N")); err != nil {
				return
			}
			continue
		}
		if _, ok := msg.(*pgproto3.GSSEncRequest); ok {
			if _, err := c.Write([]byte("N")); err != nil {
				return
			}
			continue
		}
		break
	}
	be.Send(&pgproto3.AuthenticationCleartextPassword{})
	if err := be.Flush(); err != nil {
		return
	}
	if err := be.SetAuthType(pgproto3.AuthTypeCleartextPassword); err != nil {
		return
	}
	msg, err := be.Receive()
	if err != nil {
		return
	}
	pw, ok := msg.(*pgproto3.PasswordMessage)
	if !ok {
		return
	}
	be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "28P01",
		Message: "password authentication failed for user \"weft\": wrong password " + pw.Password})
	_ = be.Flush()
}

// TestDatabasePasswordNeverPrinted opens PostgreSQL URLs and DSNs with a
// wrong password, in every form a password can be given: whatever the
// command and however the failure echoes the connection string, the
// password never reaches stderr or stdout.
func TestDatabasePasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	addr := fakePostgres(t)
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	const secret = "Sup3rS3cretPw"
	tests := []struct{ name, db string }{
		{"url userinfo", "postgres://weft:" + secret + "@" + addr + "/weft?sslmode=disable&connect_timeout=5"},
		{"url query parameter", "postgres://weft@" + addr + "/weft?sslmode=disable&password=" + secret},
		{"dsn", "host=" + host + " port=" + port + " user=weft dbname=weft sslmode=disable password=" + secret},
		{"dsn quoted", "host=" + host + " port=" + port + " user=weft dbname=weft sslmode=disable password='" + secret + "'"},
		{"unparsable url", "postgres://weft:" + secret + "@" + host + ":notaport/weft"},
	}
	commands := [][]string{{"tasks"}, {"task", "1"}, {"serve", "--addr", "127.0.0.1:0"}, {"worker"}}
	for _, tt := range tests {
		for _, cmd := range commands {
			t.Run(tt.name+"/"+cmd[0], func(t *testing.T) {
				t.Parallel()
				r := weftCLI(t, append(cmd, "--db", tt.db)...)
				require.NotEqual(t, 0, r.code, "a refused password is an error\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
				require.NotContains(t, r.stderr, secret)
				require.NotContains(t, r.stdout, secret)
				require.NotEmpty(t, strings.TrimSpace(r.stderr), "the failure is reported")
			})
		}
	}
}
