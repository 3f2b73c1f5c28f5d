#!/bin/bash
# Runs inside each guest (vm.sh run): ROLE=a|b, RAIL<k>_NETDEV/ADDR/PEER.
cd /work
mode=$(cat mode)
ibv_devices | sed 1,2d
case $mode in
pingpong)
  # both rails at once, one process per rail (two devices: rxe0, rxe1)
  ./r2-vpingpong pingpong "$ROLE" "$RAIL0_NETDEV" "$RAIL0_ADDR" "$RAIL0_PEER" > /tmp/r0 2>&1 &
  p0=$!
  ./r2-vpingpong pingpong "$ROLE" "$RAIL1_NETDEV" "$RAIL1_ADDR" "$RAIL1_PEER" > /tmp/r1 2>&1 &
  p1=$!
  wait $p0; r0=$?; wait $p1; r1=$?
  sed 's/^/rail0: /' /tmp/r0; sed 's/^/rail1: /' /tmp/r1
  [ $r0 = 0 ] && [ $r1 = 0 ]
  ;;
fail)
  ./r2-vpingpong fail "$ROLE" "$RAIL1_NETDEV" "$RAIL1_ADDR" "$RAIL1_PEER"
  ;;
cluster|mixed|mismatch)
  # r2ccld on both rails (mixed: rail 1 without RDMA, so tcp) and the
  # cluster client (daemon-guest.sh)
  bash ./daemon-guest.sh
  ;;
esac
