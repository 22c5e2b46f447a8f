package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteAddrFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "addrs.json")
	pub := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 41000}
	adm := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 41001}
	if err := writeAddrFile(path, pub, adm); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got boundAddrs
	if err := json.Unmarshal(b, &got); err != nil || got != (boundAddrs{"127.0.0.1:41000", "127.0.0.1:41001"}) {
		t.Fatalf("addr file %q: %+v %v", b, got, err)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left behind: %v", err)
	}
	if err := writeAddrFile(filepath.Join(t.TempDir(), "no", "such", "dir"), pub, adm); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}
