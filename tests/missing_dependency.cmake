# The command of a test whose dependency this build lacks (tests/CMakeLists.txt,
# egm_missing_dependency_test): fails with EGM_MISSING, which names the dependency and how to
# install it.
message(FATAL_ERROR "missing dependency: ${EGM_MISSING}")
