# The PyTorch backend (bindings/torch): its pytest suite, run with the repository's venv.
# scripts/setup_python.sh creates .venv and installs torch and the weft_torch package; when the
# venv is missing the test fails and says so (it is not skipped silently).
add_test(NAME torch_backend
  COMMAND bash -c "if [ ! -x '${CMAKE_SOURCE_DIR}/.venv/bin/python' ]; then echo 'torch_backend: ${CMAKE_SOURCE_DIR}/.venv is missing: run scripts/setup_python.sh (after scripts/setup.sh) to create it and install torch and bindings/torch' >&2; exit 1; fi; exec '${CMAKE_SOURCE_DIR}/.venv/bin/python' -m pytest -q -p no:cacheprovider '${CMAKE_SOURCE_DIR}/bindings/torch/tests'"
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/bindings/torch/tests)
set_tests_properties(torch_backend PROPERTIES TIMEOUT 600 LABELS "python;multiprocess"
  PROCESSORS 2)
