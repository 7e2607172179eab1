# Run after a doctest executable is built (cmake -P): writes CTEST_FILE with one ctest test per test case. Cases in
# doctest's test suite "numeric" (TEST_CASE("..." * doctest::test_suite("numeric"))) get the ctest label `numeric`:
# the results that depend on floating-point kernels, which .ci/run runs again under a second OpenBLAS kernel.
# Inputs: TEST_EXECUTABLE, TEST_WORKING_DIR, TEST_ENVIRONMENT, CTEST_FILE.
#
# doctest's own doctestAddTests.cmake reads the list of cases as a CMake list, so a name with ';' became two
# names that each matched no case, and each of those tests passed having run nothing. Here names never pass
# through a CMake list: lines are cut out of the listing by hand and written as bracket arguments.

execute_process(COMMAND "${TEST_EXECUTABLE}" --list-test-cases --no-colors
                OUTPUT_VARIABLE listing RESULT_VARIABLE result WORKING_DIRECTORY "${TEST_WORKING_DIR}")
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --list-test-cases exited with ${result}:\n${listing}")
endif()
execute_process(COMMAND "${TEST_EXECUTABLE}" --list-test-cases --no-colors --test-suite=numeric
                OUTPUT_VARIABLE numeric_listing RESULT_VARIABLE result WORKING_DIRECTORY "${TEST_WORKING_DIR}")
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --list-test-cases --test-suite=numeric exited with ${result}")
endif()

# doctest's filters split on ',' unless escaped, and unescape '\\'; '*' and '?' cannot be escaped but still match
# themselves, and the guard below fails a test whose filter also matches another case.
function(doctest_filter name out)
  string(REPLACE "\\" "\\\\" name "${name}")
  string(REPLACE "," "\\," name "${name}")
  set(${out} "${name}" PARENT_SCOPE)
endfunction()

set(script "")
set(registered 0)
set(expected "")
while(NOT listing STREQUAL "")
  string(FIND "${listing}" "\n" end)
  if(end EQUAL -1)
    set(line "${listing}")
    set(listing "")
  else()
    string(SUBSTRING "${listing}" 0 ${end} line)
    math(EXPR end "${end} + 1")
    string(SUBSTRING "${listing}" ${end} -1 listing)
  endif()
  if(line MATCHES "^\\[doctest\\] unskipped test cases passing the current filters: ([0-9]+)$")
    set(expected "${CMAKE_MATCH_1}")
  endif()
  if(line STREQUAL "" OR line MATCHES "^=+$" OR line MATCHES "^\\[doctest\\] ")
    continue()
  endif()
  if(line MATCHES "]==]")
    message(FATAL_ERROR "${TEST_EXECUTABLE}: the test case name '${line}' contains ']==]', which cannot be registered")
  endif()
  doctest_filter("${line}" filter)
  # Every test must run exactly one case: a filter that matched none (or several) would otherwise pass unnoticed,
  # so a doctest summary that counts other than one case fails the test (its exit status still counts too).
  string(APPEND script
    "add_test([==[${line}]==] [==[${TEST_EXECUTABLE}]==] --case-sensitive --no-colors [==[--test-case=${filter}]==])\n"
    "set_tests_properties([==[${line}]==] PROPERTIES WORKING_DIRECTORY [==[${TEST_WORKING_DIR}]==]"
    " ENVIRONMENT [==[${TEST_ENVIRONMENT}]==]"
    " FAIL_REGULAR_EXPRESSION [==[test cases: +([02-9]|[1-9][0-9]+) [|]]==])\n")
  string(FIND "${numeric_listing}" "\n${line}\n" numeric_at)
  if(NOT numeric_at EQUAL -1)
    string(APPEND script "set_tests_properties([==[${line}]==] PROPERTIES LABELS numeric)\n")
  endif()
  math(EXPR registered "${registered} + 1")
endwhile()

if(NOT registered EQUAL expected)
  message(FATAL_ERROR "${TEST_EXECUTABLE} lists ${expected} test cases but ${registered} were registered")
endif()
file(WRITE "${CTEST_FILE}" "${script}")
