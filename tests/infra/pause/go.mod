module kafleet.io/testbed/pause

go 1.22
