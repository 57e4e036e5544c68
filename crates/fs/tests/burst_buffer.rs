//! Runs tools/slurm/burst_buffer.lua the way Slurm's burst_buffer/lua plugin does, hook by hook,
//! against a fake `pliant` that records its arguments, and checks what it was asked to do and
//! what reaches the job's environment.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use mlua::{Function, Lua, Table};

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tools/slurm/burst_buffer.lua"
);
const JOBS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/jobs");

/// Held while a test runs the fake: a fork in one test while another still has the fake open
/// for writing would make exec fail with ETXTBSY.
static FORKS: Mutex<()> = Mutex::new(());

/// Every hook Slurm 24.05 and later refuse to start without (`req_fxns` in
/// src/plugins/burst_buffer/lua/burst_buffer_lua.c).
const HOOKS: [&str; 13] = [
    "slurm_bb_job_process",
    "slurm_bb_pools",
    "slurm_bb_job_teardown",
    "slurm_bb_setup",
    "slurm_bb_data_in",
    "slurm_bb_test_data_in",
    "slurm_bb_real_size",
    "slurm_bb_paths",
    "slurm_bb_pre_run",
    "slurm_bb_post_run",
    "slurm_bb_data_out",
    "slurm_bb_test_data_out",
    "slurm_bb_get_status",
];

/// Records its arguments in calls.log next to itself, one a line with `.` after the last.
/// `job check` and `job setup` fail for a script containing "bad"; `job setup` prints what the
/// real one prints, except for job 7, for which it prints something else.
const FAKE_PLIANT: &str = r#"#!/bin/sh
log="$(dirname "$0")/calls.log"
for a in "$@"; do printf '%s\n' "$a"; done >>"$log"
echo . >>"$log"
case "$1 $2" in
"job check")
	if grep -q bad "$3"; then
		echo "$3:5: #DW jobdw: capacity=12XB: expected a size such as 10GiB" >&2
		exit 1
	fi ;;
"job setup")
	if grep -q bad "$3"; then
		echo "setup refused" >&2
		exit 3
	fi
	if [ "$5" = 7 ]; then
		echo "not a variable"
	else
		echo "DW_JOB_STRIPED_CACHE=/tmp/x"
		echo
		echo "PLIANT_JOB_ID=$5"
	fi ;;
"job teardown") ;;
*)
	echo "unexpected: $*" >&2
	exit 2 ;;
esac
"#;

/// A Lua state holding the script, with the `slurm` table the plugin provides and
/// `os.getenv` answering from `env` for PLIANT_* names, so the test's own environment (which
/// it could only change with `unsafe`) plays no part.
fn load(env: &[(&str, &str)]) -> Lua {
    let lua = Lua::new();
    let fake_env = lua.create_table().expect("a table");
    for (k, v) in env {
        fake_env.set(*k, *v).expect("set");
    }
    lua.globals().set("fake_env", fake_env).expect("set");
    lua.load(
        r#"
        slurm = { SUCCESS = 0, ERROR = -1, SLURM_BB_BUSY = "BUSY", logged = {} }
        for _, level in ipairs({ "log_info", "log_verbose", "log_debug", "log_debug2",
                                 "log_error", "log_user" }) do
            slurm[level] = function(fmt, ...)
                table.insert(slurm.logged, string.format(fmt, ...))
            end
        end
        local real_getenv = os.getenv
        os.getenv = function(name)
            if fake_env[name] ~= nil or string.match(name, "^PLIANT_") then
                return fake_env[name]
            end
            return real_getenv(name)
        end
        "#,
    )
    .set_name("fake slurm")
    .exec()
    .expect("the fake slurm table loads");
    let script = std::fs::read_to_string(SCRIPT).expect("burst_buffer.lua is readable");
    lua.load(script)
        .set_name("burst_buffer.lua")
        .exec()
        .expect("burst_buffer.lua loads");
    lua
}

/// Calls a hook and returns its status and message.
fn call(lua: &Lua, hook: &str, args: impl mlua::IntoLuaMulti) -> (i64, Option<String>) {
    let f: Function = lua.globals().get(hook).expect("the hook is defined");
    f.call(args)
        .unwrap_or_else(|e| panic!("{hook} raised an error: {e}"))
}

/// The calls recorded so far, each as its argument list.
fn calls(log: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut out = Vec::new();
    let mut args = Vec::new();
    for line in text.lines() {
        if line == "." {
            out.push(std::mem::take(&mut args));
        } else {
            args.push(line.to_string());
        }
    }
    out
}

fn words(ws: &[&str]) -> Vec<String> {
    ws.iter().map(|w| w.to_string()).collect()
}

fn copy_job(name: &str, dir: &Path) -> String {
    let to = dir.join(name);
    std::fs::copy(Path::new(JOBS).join(name), &to).expect("the sample is copied");
    to.to_str().expect("a UTF-8 path").to_string()
}

#[test]
fn every_hook_slurm_requires_is_defined() {
    let lua = load(&[]);
    for hook in HOOKS {
        let f: mlua::Value = lua.globals().get(hook).expect("a global");
        assert!(f.is_function(), "{hook} is not a function");
    }
    // Without a size there is no pool to report, and nothing is run to find out.
    assert_eq!(call(&lua, "slurm_bb_pools", ()), (0, None));
}

#[test]
fn a_job_goes_through_every_hook() {
    let _forks = FORKS.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().expect("a temporary directory");
    // A space and a quote in the paths check the shell quoting.
    let bin = tmp.path().join("bin dir");
    let jobs = tmp.path().join("it's jobs");
    let state = tmp.path().join("state");
    std::fs::create_dir(&bin).expect("mkdir");
    std::fs::create_dir(&jobs).expect("mkdir");
    let fake = bin.join("pliant");
    std::fs::write(&fake, FAKE_PLIANT).expect("the fake is written");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755))
            .expect("the fake is executable");
    }
    let log = bin.join("calls.log");
    let good = copy_job("good.sh", &jobs);
    let bad = copy_job("bad.sh", &jobs);
    let fake = fake.to_str().expect("a UTF-8 path");
    let lua = load(&[
        ("PLIANT_BIN", fake),
        ("PLIANT_BB_STATE_DIR", state.to_str().expect("a UTF-8 path")),
        ("PLIANT_BB_POOL_BYTES", "1099511627776"),
    ]);
    let info: Table = lua.create_table().expect("a table");
    info.set("job_id", 42).expect("set");
    let env_file = |job: &str| state.join(format!("{job}.env"));
    let mut expected: Vec<Vec<String>> = Vec::new();

    // Submission.
    assert_eq!(
        call(
            &lua,
            "slurm_bb_job_process",
            (good.as_str(), "1000", "100", &info)
        ),
        (0, None)
    );
    expected.push(words(&["job", "check", &good]));
    assert_eq!(
        call(
            &lua,
            "slurm_bb_job_process",
            (bad.as_str(), "1000", "100", &info)
        ),
        (
            -1,
            Some(format!(
                "{fake} job check failed: {bad}:5: #DW jobdw: capacity=12XB: expected a size \
                 such as 10GiB"
            ))
        )
    );
    expected.push(words(&["job", "check", &bad]));
    assert_eq!(
        call(&lua, "slurm_bb_pools", ()),
        (
            0,
            Some(r#"{"pools":[{"id":"pliant","quantity":1099511627776,"granularity":1}]}"#.into())
        )
    );

    // Stage-in.
    let stage_in = (
        "42",
        "1000",
        "100",
        "pliant",
        "10995116277760",
        good.as_str(),
        &info,
    );
    assert_eq!(call(&lua, "slurm_bb_setup", stage_in), (0, None));
    assert_eq!(calls(&log), expected, "setup leaves the work to data_in");
    let job = ("42", good.as_str(), "1000", "100", &info);
    assert_eq!(call(&lua, "slurm_bb_data_in", job), (0, None));
    expected.push(words(&["job", "setup", &good, "--job-id", "42"]));
    assert!(env_file("42").exists());
    assert_eq!(call(&lua, "slurm_bb_test_data_in", job), (0, None));
    assert_eq!(
        call(&lua, "slurm_bb_real_size", ("42", "1000", "100", &info)),
        (0, None)
    );

    // Start: the variables setup printed reach the job, without the empty line.
    let path_file = tmp.path().join("path");
    std::fs::write(&path_file, "").expect("Slurm creates it empty");
    let paths = (
        "42",
        good.as_str(),
        path_file.to_str().expect("a UTF-8 path"),
        "1000",
        "100",
        &info,
    );
    assert_eq!(call(&lua, "slurm_bb_paths", paths), (0, None));
    assert_eq!(
        std::fs::read_to_string(&path_file).expect("the path file"),
        "DW_JOB_STRIPED_CACHE=/tmp/x\nPLIANT_JOB_ID=42\n"
    );
    assert_eq!(call(&lua, "slurm_bb_pre_run", job), (0, None));

    // End: write-back at stage-out, then a teardown that finds it done.
    assert_eq!(call(&lua, "slurm_bb_post_run", job), (0, None));
    assert_eq!(call(&lua, "slurm_bb_data_out", job), (0, None));
    expected.push(words(&["job", "teardown", "--job-id", "42"]));
    assert_eq!(call(&lua, "slurm_bb_test_data_out", job), (0, None));
    let teardown = ("42", good.as_str(), "false", "1000", "100");
    assert_eq!(call(&lua, "slurm_bb_job_teardown", teardown), (0, None));
    expected.push(words(&["job", "teardown", "--job-id", "42"]));
    assert!(!env_file("42").exists(), "teardown forgets the job");

    // A hurried teardown (the job never ran, or was cancelled with --hurry) discards.
    let teardown = ("43", good.as_str(), "true", "1000", "100");
    assert_eq!(call(&lua, "slurm_bb_job_teardown", teardown), (0, None));
    expected.push(words(&["job", "teardown", "--job-id", "43", "--discard"]));

    // A failed setup holds the job with pliant's message, keeps nothing, and a later start
    // of that job fails rather than running without its cache.
    let (status, message) = call(
        &lua,
        "slurm_bb_data_in",
        ("44", bad.as_str(), "1000", "100"),
    );
    assert_eq!(
        (status, message.as_deref()),
        (
            -1,
            Some(format!("{fake} job setup failed: setup refused").as_str())
        )
    );
    expected.push(words(&["job", "setup", &bad, "--job-id", "44"]));
    assert!(!env_file("44").exists() && !state.join("44.env.tmp").exists());
    let (status, message) = call(
        &lua,
        "slurm_bb_paths",
        (
            "44",
            bad.as_str(),
            path_file.to_str().expect("UTF-8"),
            "1000",
            "100",
        ),
    );
    assert_eq!(status, -1);
    assert!(message.is_some_and(|m| m.contains("job 44")));

    // Output that is not NAME=VALUE is refused at stage-in.
    let (status, message) = call(
        &lua,
        "slurm_bb_data_in",
        ("7", good.as_str(), "1000", "100"),
    );
    assert_eq!(
        (status, message.as_deref()),
        (
            -1,
            Some(format!("{fake} job setup printed \"not a variable\", not NAME=VALUE").as_str())
        )
    );
    expected.push(words(&["job", "setup", &good, "--job-id", "7"]));
    assert!(!env_file("7").exists());

    let (status, message) = call(&lua, "slurm_bb_get_status", ("0", "0", "extra"));
    assert_eq!(status, 0);
    assert!(message.is_some_and(|m| m.contains(fake)));

    assert_eq!(calls(&log), expected);
    let logged: Vec<String> = lua
        .load("return slurm.logged")
        .eval()
        .expect("the log is readable");
    assert!(
        logged.is_empty(),
        "nothing to log in a good run: {logged:?}"
    );
}

#[test]
fn a_missing_pliant_fails_with_the_shells_message() {
    let _forks = FORKS.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let missing: PathBuf = tmp.path().join("no such pliant");
    let lua = load(&[("PLIANT_BIN", missing.to_str().expect("UTF-8"))]);
    let job = Path::new(JOBS).join("good.sh");
    let (status, message) = call(
        &lua,
        "slurm_bb_job_process",
        (job.to_str().expect("UTF-8"), "1000", "100"),
    );
    assert_eq!(status, -1);
    let message = message.expect("a message");
    assert!(
        message.starts_with(&format!("{} job check failed: ", missing.display()))
            && (message.contains("not found") || message.contains("No such file")),
        "{message}"
    );
}
