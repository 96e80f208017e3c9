#!/bin/sh
# bench/peers: spillway vs rclone, mergerfs, s3fs, passthrough_ll, tmpfs, disk.
# usage: sudo bench/peers/run.sh [--quick] [--budget 1G] [--peers a,b] ... (see README.md)
exec python3 "$(dirname "$0")/peers.py" "$@"
