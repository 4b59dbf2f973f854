// Package fuzz holds the tooling around the module's fuzz targets: run.sh
// runs them and harvests their corpora. The targets themselves live next to
// the parsers they exercise (mpa, ddp, rdmap) so that they can use
// unexported helpers; see README.md.
package fuzz
