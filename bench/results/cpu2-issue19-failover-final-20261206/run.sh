#!/usr/bin/env bash
# 100 runs of test_ha_master's test_failover at ha_lease_ttl 2 s (from build-dev), one after another.
cd build-dev || exit 2
for i in $(seq 1 100); do
  EGM_TEST_HA_TTL=2 EGM_TEST_BINARY=$PWD/bin/egmstore EGM_TEST_FILTER=test_failover \
    timeout 300 tests/integration_test_ha_master > /tmp/fo/run-$i.log 2>&1
  echo "run $i rc $?" >> /tmp/fo/status
done
