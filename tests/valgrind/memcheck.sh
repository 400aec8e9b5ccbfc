#!/bin/sh
# prove's --exec for `make valgrind`: runs one test under memcheck.  A
# compiled program runs under valgrind directly; a shell script runs as
# itself with RN_TEST_WRAP set to the valgrind command, which the script
# puts in front of the programs it starts.  The harness forks without
# exec, so memcheck follows every child; an error or a definite/indirect
# leak in any process makes it exit 99, which fails that test.
here=$(dirname "$0")
RN_TEST_WRAP="valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect --suppressions=$here/memcheck.supp"
export RN_TEST_WRAP
case $1 in
  *.sh) exec sh "$@" ;;
  *) exec $RN_TEST_WRAP "$@" ;;
esac
