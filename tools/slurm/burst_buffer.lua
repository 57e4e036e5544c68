--[[
burst_buffer.lua: Pliant's per-job write-back cache behind Slurm's burst_buffer/lua plugin.
Jobs ask for it with DataWarp's "#DW jobdw type=cache ..." lines; the pliant binary reads
them, sets the cache up, and tears it down.

Install on the slurmctld host:
  slurm.conf         BurstBufferType=burst_buffer/lua
  burst_buffer.conf  Directive=DW
  this file, as burst_buffer.lua, next to slurm.conf.
The plugin's default directive is BB_LUA, with which Slurm calls this file only for jobs that
also carry a "#BB_LUA" line. With Directive=DW, Slurm itself refuses a directive line with
"capacity=" but no "pool=", or with a pool slurm_bb_pools does not report: set
PLIANT_BB_POOL_BYTES and have jobs write pool=pliant (burst_buffer_lua.c, _parse_capacity).

Environment of slurmctld:
  PLIANT_BIN            the pliant binary (default: pliant, found in PATH)
  PLIANT_BB_STATE_DIR   keeps what "pliant job setup" prints from stage-in until the job
                        starts; writable by SlurmUser (default /var/spool/pliant/slurm-bb)
  PLIANT_BB_POOL        name of the pool reported to Slurm (default pliant)
  PLIANT_BB_POOL_BYTES  its size in bytes; unset, no pool is reported

Hook names and arguments are those of etc/burst_buffer.lua.example in Slurm 24.05 and later,
which require slurm_bb_test_data_in and slurm_bb_test_data_out; older versions never call
those two and pass no job_info, which nothing here uses. Slurm loads this file afresh for
every call, so nothing survives in Lua variables from one hook to the next.
--]]

local PLIANT = os.getenv("PLIANT_BIN") or "pliant"
local STATE_DIR = os.getenv("PLIANT_BB_STATE_DIR") or "/var/spool/pliant/slurm-bb"
local POOL = os.getenv("PLIANT_BB_POOL") or "pliant"
local POOL_BYTES = os.getenv("PLIANT_BB_POOL_BYTES")

-- One shell word: in single quotes, each ' written as '\''.
local function quote(s)
	return "'" .. (string.gsub(tostring(s), "'", "'\\''")) .. "'"
end

-- Runs pliant with the given arguments and returns its exit status and what it printed on
-- stderr, and on stdout too unless stdout goes to the file out_path.
local function pliant(args, out_path)
	local words = { quote(PLIANT) }
	for _, a in ipairs(args) do
		words[#words + 1] = quote(a)
	end
	local cmd = table.concat(words, " ")
	if out_path then
		cmd = cmd .. " >" .. quote(out_path)
	end
	-- The status is echoed because io.popen():close() reports it only from Lua 5.2 on.
	local p = io.popen("(" .. cmd .. ") 2>&1; echo \"exit=$?\"")
	if not p then
		return nil, "cannot start /bin/sh"
	end
	local out = p:read("*a")
	p:close()
	local text, status = string.match(out, "^(.-)\n?exit=(%d+)\n?$")
	return tonumber(status), string.match(text or out, "^%s*(.-)%s*$")
end

local function failed(what, status, out)
	if out == "" then
		out = "exit status " .. tostring(status)
	end
	return string.format("%s %s failed: %s", PLIANT, what, out)
end

-- Where stage-in leaves the job's environment for slurm_bb_paths.
local function env_path(job_id)
	return STATE_DIR .. "/" .. job_id .. ".env"
end

-- Called at submission while slurmctld waits with its locks held, so pliant job check must be
-- quick. An error rejects the job and sbatch prints the message.
function slurm_bb_job_process(job_script, uid, gid, job_info)
	local status, out = pliant({ "job", "check", job_script })
	if status ~= 0 then
		return slurm.ERROR, failed("job check", status, out)
	end
	return slurm.SUCCESS
end

-- Called often from slurmctld, so it only reads the environment.
function slurm_bb_pools()
	if not POOL_BYTES then
		return slurm.SUCCESS
	end
	if not string.match(POOL_BYTES, "^%d+$") or not string.match(POOL, "^[%w_.-]+$") then
		return slurm.ERROR, "PLIANT_BB_POOL must be a plain name and PLIANT_BB_POOL_BYTES a number"
	end
	return slurm.SUCCESS,
		string.format('{"pools":[{"id":"%s","quantity":%s,"granularity":1}]}', POOL, POOL_BYTES)
end

-- The work is in slurm_bb_data_in: setup runs under OtherTimeout (5 minutes by default),
-- data_in under StageInTimeout (a day), and preloading can take that long.
function slurm_bb_setup(job_id, uid, gid, pool, bb_size, job_script, job_info)
	return slurm.SUCCESS
end

function slurm_bb_data_in(job_id, job_script, uid, gid, job_info)
	if not string.match(job_id, "^%d+$") then
		return slurm.ERROR, "unexpected job id " .. tostring(job_id)
	end
	os.execute("mkdir -p " .. quote(STATE_DIR))
	local env = env_path(job_id)
	local tmp = env .. ".tmp"
	local status, out = pliant({ "job", "setup", job_script, "--job-id", job_id }, tmp)
	if status ~= 0 then
		os.remove(tmp)
		return slurm.ERROR, failed("job setup", status, out)
	end
	-- Checked now, while a failure can still hold the job, rather than when it starts.
	local f = io.open(tmp, "r")
	local printed = f and f:read("*a") or ""
	if f then
		f:close()
	end
	for line in string.gmatch(printed, "[^\n]+") do
		if not string.match(line, "^[%a_][%w_]*=") then
			os.remove(tmp)
			return slurm.ERROR,
				string.format("%s job setup printed %q, not NAME=VALUE", PLIANT, line)
		end
	end
	local ok, err = os.rename(tmp, env)
	if not ok then
		return slurm.ERROR, "cannot keep the output of " .. PLIANT .. " job setup: " .. tostring(err)
	end
	return slurm.SUCCESS
end

-- slurm_bb_data_in finishes its work before returning.
function slurm_bb_test_data_in(job_id, job_script, uid, gid, job_info)
	return slurm.SUCCESS
end

function slurm_bb_real_size(job_id, uid, gid, job_info)
	return slurm.SUCCESS
end

-- Called synchronously when the job starts: copies the variables kept at stage-in into the
-- file whose NAME=VALUE lines Slurm adds to the job's environment.
function slurm_bb_paths(job_id, job_script, path_file, uid, gid, job_info)
	local f = io.open(env_path(job_id), "r")
	if not f then
		return slurm.ERROR, "no output of " .. PLIANT .. " job setup is kept for job " .. job_id
	end
	local printed = f:read("*a")
	f:close()
	local out, err = io.open(path_file, "w")
	if not out then
		return slurm.ERROR, "cannot write " .. path_file .. ": " .. tostring(err)
	end
	-- One variable a line and no empty lines: Slurm would add an empty one.
	for line in string.gmatch(printed, "[^\n]+") do
		out:write(line, "\n")
	end
	out:close()
	return slurm.SUCCESS
end

function slurm_bb_pre_run(job_id, job_script, uid, gid, job_info)
	return slurm.SUCCESS
end

function slurm_bb_post_run(job_id, job_script, uid, gid, job_info)
	return slurm.SUCCESS
end

-- The cache is written back and taken down here rather than only in slurm_bb_job_teardown:
-- stage-out runs under StageOutTimeout (a day by default; teardown gets OtherTimeout, five
-- minutes, and Slurm gives up on it after three tries), and a failure here keeps the job in
-- stage-out with its cache instead of losing dirty data.
function slurm_bb_data_out(job_id, job_script, uid, gid, job_info)
	local status, out = pliant({ "job", "teardown", "--job-id", job_id })
	if status ~= 0 then
		return slurm.ERROR, failed("job teardown", status, out)
	end
	return slurm.SUCCESS
end

function slurm_bb_test_data_out(job_id, job_script, uid, gid, job_info)
	return slurm.SUCCESS
end

-- Also reached without stage-out: Slurm hurries a teardown when the job never ran, when
-- stage-in or pre-run failed, or on scancel --hurry, and then nothing the job wrote is wanted.
-- After a stage-out, pliant finds nothing left to do.
function slurm_bb_job_teardown(job_id, job_script, hurry, uid, gid)
	local args = { "job", "teardown", "--job-id", job_id }
	if hurry == "true" then
		args[#args + 1] = "--discard"
	end
	local status, out = pliant(args)
	if status ~= 0 then
		return slurm.ERROR, failed("job teardown", status, out)
	end
	os.remove(env_path(job_id))
	return slurm.SUCCESS
end

-- scontrol show bbstat
function slurm_bb_get_status(uid, gid, ...)
	return slurm.SUCCESS,
		string.format("pliant burst buffer: PLIANT_BIN=%s PLIANT_BB_STATE_DIR=%s\n", PLIANT, STATE_DIR)
end
