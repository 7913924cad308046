"""One bash session per `sbx run`: state carries from one CMD to the next."""

from conftest import describe, err


def test_variables_and_cwd_persist(sbx):
    cp = sbx("cd /tmp && mkdir -p d1/d2 && cd d1/d2; x=5; y='two words'",
             'echo "$x|$y"; pwd; echo "$PWD"', "cd ..; pwd", "cd -; echo $OLDPWD")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"5|two words\n/tmp/d1/d2\n/tmp/d1/d2\n/tmp/d1\n/tmp/d1/d2\n/tmp/d1\n"


def test_indexed_and_associative_arrays_persist(sbx):
    cp = sbx("arr=(zero 'one two' three); arr[10]=ten; declare -A m=([k1]=v1 ['k 2']='v 2')",
             'echo "${#arr[@]} ${arr[1]} ${arr[10]} ${!arr[*]}"',
             'echo "${m[k1]}|${m[k 2]}|${#m[@]}"; declare -p m | grep -q "declare -A" && echo assoc')
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"4 one two ten 0 1 2 10\nv1|v 2|2\nassoc\n"


def test_functions_persist_and_can_be_unset(sbx):
    cp = sbx('greet() { local who=$1; echo "hi $who"; return 3; }',
             "greet bob; echo rc=$?",
             "unset -f greet",
             "type greet >/dev/null 2>&1; echo type=$?")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"hi bob\nrc=3\ntype=1\n"


def test_alias_defined_earlier_is_expanded_later(sbx):
    cp = sbx("alias sayhi='echo ALIAS-EXPANDED'", "sayhi with-arg", "unalias sayhi",
             "sayhi 2>/dev/null; echo rc=$?")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"ALIAS-EXPANDED with-arg\nrc=127\n"


def test_set_o_pipefail_persists(sbx):
    cp = sbx("false | true; echo before=$?", "set -o pipefail", "false | true; echo after=$?",
             "set +o pipefail", "false | true; echo off=$?")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"before=0\nafter=1\noff=0\n"


def test_shopt_nullglob_persists(sbx):
    cp = sbx("echo /nonexistent-dir/*.zz", "shopt -s nullglob", "echo '<' /nonexistent-dir/*.zz '>'",
             "shopt -q nullglob && echo on")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"/nonexistent-dir/*.zz\n< >\non\n"


def test_shopt_extglob_affects_parsing_of_later_command(sbx):
    # extglob changes how bash *parses* a command, so it must be in effect before the next
    # command text is parsed.
    cp = sbx("cd /tmp && touch a.txt b.log c.txt", "shopt -s extglob", "echo !(*.txt)")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"b.log\n"


def test_umask_persists(sbx):
    cp = sbx("umask", "umask 077", "umask; touch /tmp/f; stat -c %a /tmp/f")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"0022\n0077\n600\n"


def test_exported_variables_reach_child_processes(sbx):
    cp = sbx("export EXP_A=alpha; NOTEXP_B=beta; export EXP_C=gamma",
             "env | grep -E '^(EXP_A|NOTEXP_B|EXP_C)=' | sort; echo \"$NOTEXP_B\"",
             "export -n EXP_C", "env | grep -c '^EXP_C='; echo $EXP_C")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"EXP_A=alpha\nEXP_C=gamma\nbeta\n0\ngamma\n"


def test_unset_persists_as_unset(sbx):
    cp = sbx("export GONE=1; KEEP=2", "unset GONE; unset HOME",
             'echo "${GONE-unset}|${HOME-unset}|$KEEP"; env | grep -cE "^(GONE|HOME)="; true')
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"unset|unset|2\n0\n"


def test_special_characters_in_values_survive(sbx):
    cp = sbx(r"""x=$'line1\nline2\ttab'; y='it'"'"'s $HOME `x` \\'; z="ünïcödé ✓" """,
             'printf "%q\\n" "$x"; printf "%s\\n" "$y"; printf "%s\\n" "$z"')
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == ("$'line1\\nline2\\ttab'\nit's $HOME `x` \\\\\nünïcödé ✓\n").encode()


def test_misc_state_readonly_integer_traps_fds_dirstack(sbx):
    cp = sbx("readonly RO=1; declare -i N=40; trap 'echo trapped' USR1; exec 7>/tmp/fd7; "
             "pushd /tmp >/dev/null; pushd /usr >/dev/null; set -o noclobber",
             'N+=2; echo N=$N; (RO=2) 2>/dev/null || echo ro-ok; kill -USR1 $$; echo via7 >&7; '
             'dirs; echo x > /tmp/fd7 2>/dev/null || echo noclobber-ok',
             "cat /tmp/fd7")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"N=42\nro-ok\ntrapped\n/usr /tmp ~\nnoclobber-ok\nvia7\n"


def test_dollar_question_mark_carries_over(sbx):
    cp = sbx("(exit 17)", "echo $?")
    assert cp.stdout == b"17\n", describe(cp)


# ------------------------------------------------------------------ exit / set -e / errors


def test_exit_n_gives_n_as_last_command(sbx):
    cp = sbx("echo before; exit 7; echo not-reached")
    assert cp.returncode == 7, describe(cp)
    assert cp.stdout == b"before\n"


def test_exit_n_keeps_changes_made_before_it(sbx):
    cp = sbx("x=1; cd /tmp; f() { echo fn; }; exit 7; x=2", 'echo "x=$x"; pwd; f; echo $?')
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"x=1\n/tmp\nfn\n0\n"


def test_exit_in_function_and_large_codes(sbx):
    cp = sbx("die() { exit $1; }; die 300")
    assert cp.returncode == 300 % 256, describe(cp)
    cp = sbx("exit 255")
    assert cp.returncode == 255, describe(cp)


def test_set_e_failure_stops_command_and_keeps_state(sbx):
    cp = sbx("set -e; y=2; false; y=3")
    assert cp.returncode == 1, describe(cp)
    cp = sbx("set -e; y=2; (exit 4); y=3", 'echo "y=$y"; set +e; false; echo still-here')
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"y=2\nstill-here\n"


def test_set_e_failure_code(sbx):
    cp = sbx("set -e; y=2; (exit 4); echo no")
    assert cp.returncode == 4, describe(cp)
    assert cp.stdout == b""


def test_syntax_error_unbalanced_quote_then_next_works(sbx):
    cp = sbx('echo "abc')
    assert cp.returncode == 2, describe(cp)
    assert "unexpected EOF while looking for matching" in err(cp)
    cp = sbx("x=kept", 'echo "abc', 'echo "next $x"')
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"next kept\n"


def test_syntax_error_if_without_fi_then_next_works(sbx):
    cp = sbx("if true; then echo x")
    assert cp.returncode == 2, describe(cp)
    assert "syntax error" in err(cp)
    assert cp.stdout == b""
    cp = sbx("if true; then echo x", "echo ok; if true; then echo yes; fi")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"ok\nyes\n"


def test_syntax_error_unexpected_token(sbx):
    cp = sbx("echo )", "echo fine")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"fine\n"
    assert "syntax error near unexpected token" in err(cp)


def test_unknown_command_127(sbx):
    cp = sbx("definitely_not_a_command_zz")
    assert cp.returncode == 127, describe(cp)
    assert "definitely_not_a_command_zz: command not found" in err(cp)
    cp = sbx("definitely_not_a_command_zz", "echo after $?")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"after 127\n"


def test_command_killed_by_signal_rolls_back(sbx):
    # The command kills its own shell: 128+9, and the session is as it was before it.
    cp = sbx("x=1", "x=2; kill -9 $$")
    assert cp.returncode == 137, describe(cp)
    cp = sbx("x=1; cd /tmp", "x=2; cd /; kill -9 $$", 'echo "x=$x"; pwd')
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"x=1\n/tmp\n"


def test_multiline_command_and_heredoc(sbx):
    cp = sbx("cat <<'EOF'\nline $1\nsecond\nEOF\nfor i in 1 2; do\n  echo i=$i\ndone")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"line $1\nsecond\ni=1\ni=2\n"


def test_many_commands_in_one_session(sbx):
    cmds = ["n=0"] + ["n=$((n+1))"] * 40 + ["echo $n"]
    cp = sbx(*cmds)
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"40\n"


def test_status_of_single_external_command_carries_over(sbx):
    cp = sbx("true", "ls /nonexistent-zz", 'echo "status=$?"')
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"status=2\n", describe(cp)


def test_status_of_external_command_in_a_list_carries_over(sbx):
    cp = sbx("true", "ls /nonexistent-zz 2>/dev/null", 'echo "status=$?"',
             "x=1; /bin/false", 'echo "status=$?"')
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"status=2\nstatus=1\n", describe(cp)
