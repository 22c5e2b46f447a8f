package main

// The time zone database is embedded so that calendar quotas
// (calendar.time_zone) work in images without /usr/share/zoneinfo.
import _ "time/tzdata"
