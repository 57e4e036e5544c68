--[[
burst_buffer.lua: the controller's side of Pliant's per-job write-back cache, for Slurm 22.05's
burst_buffer/lua plugin. Jobs ask for it with DataWarp's "#DW jobdw type=cache ..." lines.

Slurm runs this file on the slurmctld host only; its 22.05 plugin has no hook on the compute
nodes. So the work is divided as DataWarp divides it:
  here (controller)  checks directives at submission, accounts capacity in the pool, hands the
                     job's script to the node (stage-in) and waits for the node's write-back
                     (stage-out);
  node.sh (node)     run as root by slurmd as Prolog and Epilog: mounts the cache for the job's
                     user, preloads, and at the end writes back and unmounts.
See docs/slurm.md for the installation.

Install on the slurmctld host:
  slurm.conf         BurstBufferType=burst_buffer/lua
                     Prolog=... and Epilog=... running tools/slurm/node.sh on the nodes
  burst_buffer.conf  Directive=DW
  this file, as burst_buffer.lua, next to slurm.conf.

Environment of slurmctld (this file reads it with os.getenv):
  PLIANT_BIN            the pliant binary (default: pliant, found in PATH)
  PLIANT_BB_STATE_DIR   where a job's script is handed to its node and the node's stage-out
                        outcome comes back; shared with the nodes (default
                        /var/spool/pliant/slurm-bb)
  PLIANT_JOB_ROOT       where the nodes mount jobs' caches (default /tmp/pliant-jobs, as pliant's)
  PLIANT_BB_POOL        name of the pool reported to Slurm (default pliant)
  PLIANT_BB_POOL_BYTES  its size in bytes; unset, no pool is reported, and Slurm then refuses
                        every "#DW jobdw ... capacity=" line (Directive=DW needs a pool)
  PLIANT_BB_STAGE_OUT_WAIT  seconds slurm_bb_data_out waits for the node (default 600)
  PLIANT_BB_TEARDOWN_WAIT   seconds a hurried slurm_bb_job_teardown waits for the node to
                            discard (default 120; Slurm's OtherTimeout must be longer)

Hook names and arguments are those of Slurm 22.05 (etc/burst_buffer.lua.example): every
argument is a string, job_script is the path of the batch script slurmctld keeps. Slurm loads
this file afresh for every call, so nothing survives in Lua variables from one hook to the next.
It runs under Lua 5.1 (what Debian's plugin links): no goto, and io.popen():close() gives no
exit status.
--]]

local PLIANT = os.getenv("PLIANT_BIN") or "pliant"
local STATE_DIR = os.getenv("PLIANT_BB_STATE_DIR") or "/var/spool/pliant/slurm-bb"
local JOB_ROOT = os.getenv("PLIANT_JOB_ROOT") or "/tmp/pliant-jobs"
local POOL = os.getenv("PLIANT_BB_POOL") or "pliant"
local POOL_BYTES = os.getenv("PLIANT_BB_POOL_BYTES")
local STAGE_OUT_WAIT = tonumber(os.getenv("PLIANT_BB_STAGE_OUT_WAIT") or "600") or 600
local TEARDOWN_WAIT = tonumber(os.getenv("PLIANT_BB_TEARDOWN_WAIT") or "120") or 120

-- One shell word: in single quotes, each ' written as '\''.
local function quote(s)
	return "'" .. (string.gsub(tostring(s), "'", "'\\''")) .. "'"
end

-- Runs a shell command; returns its exit status and its output (stdout and stderr), trimmed.
local function run(cmd)
	-- The status is echoed because io.popen():close() reports none in Lua 5.1.
	local p = io.popen("(" .. cmd .. ") 2>&1; echo \"exit=$?\"")
	if not p then
		return nil, "cannot start /bin/sh"
	end
	local out = p:read("*a")
	p:close()
	local text, status = string.match(out, "^(.-)\n?exit=(%d+)\n?$")
	return tonumber(status), string.match(text or out, "^%s*(.-)%s*$")
end

local function pliant(args)
	local words = { quote(PLIANT) }
	for _, a in ipairs(args) do
		words[#words + 1] = quote(a)
	end
	return run(table.concat(words, " "))
end

local function failed(what, status, out)
	if out == nil or out == "" then
		out = "exit status " .. tostring(status)
	end
	return string.format("%s %s failed: %s", PLIANT, what, out)
end

local function job_dir(job_id)
	return STATE_DIR .. "/" .. job_id
end

local function read_file(path)
	local f = io.open(path, "r")
	if not f then
		return nil
	end
	local text = f:read("*a")
	f:close()
	return text
end

-- Writes a whole file at once (through a rename), for the node to read.
local function write_file(path, text)
	local tmp = path .. ".tmp"
	local f, err = io.open(tmp, "w")
	if not f then
		return nil, err
	end
	f:write(text)
	f:close()
	return os.rename(tmp, path)
end

-- The nodes that mounted the job's cache: each node's Prolog leaves `mounted.<node>` (a job on
-- several nodes has a cache on each, and each node's Epilog writes its own back).
local function mounted_nodes(dir)
	local status, out = run("ls " .. quote(dir))
	local nodes = {}
	if status == 0 then
		for name in string.gmatch(out, "[^\n]+") do
			local node = string.match(name, "^mounted%.([%w._-]+)$")
			if node then
				nodes[#nodes + 1] = node
			end
		end
	end
	return nodes
end

-- Waits, at most `limit` seconds, for the outcome of the teardown on every node that mounted the
-- job's cache (`stage-out.<node>`); returns slurm.SUCCESS when each wrote back (or discarded)
-- and unmounted, or slurm.ERROR and the failures. No node mounted: nothing of the job's is in a
-- cache. By stage-out and teardown every Prolog has run, so the nodes that mounted are known.
local function node_outcome(dir, limit)
	local nodes = mounted_nodes(dir)
	local waited = 0
	while true do
		local missing, failures = {}, {}
		for _, node in ipairs(nodes) do
			local text = read_file(dir .. "/stage-out." .. node)
			if not text then
				missing[#missing + 1] = node
			else
				local outcome, rest = string.match(text, "^(%a+)\n?(.-)%s*$")
				if outcome ~= "ok" then
					failures[#failures + 1] = node .. ": " .. (rest or text)
				end
			end
		end
		if #missing == 0 then
			if #failures > 0 then
				return slurm.ERROR, "the node's write-back failed: " .. table.concat(failures, "; ")
			end
			return slurm.SUCCESS
		end
		if waited >= limit then
			return slurm.ERROR,
				string.format("no stage-out outcome in %ss from %s (%s/stage-out.<node>)",
					waited, table.concat(missing, ", "), dir)
		end
		os.execute("sleep 1")
		waited = waited + 1
	end
end

-- Synchronous, at submission, while slurmctld holds its locks: pliant job check is quick. An
-- error rejects the job and sbatch prints the message, which names the line and the parameter.
function slurm_bb_job_process(job_script)
	local status, out = pliant({ "job", "check", job_script })
	if status ~= 0 then
		-- The path is slurmctld's copy of the script; the user knows it as the batch script.
		out = string.gsub(out, "[^%s:]*/script:", "batch script:")
		return slurm.ERROR, out
	end
	return slurm.SUCCESS
end

-- Called often from slurmctld, so it only reads the environment. Slurm takes a job's capacity
-- from the pool at stage-in and gives it back after teardown; concurrent jobs share it.
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

-- Nothing to reserve beyond what Slurm accounts in the pool.
function slurm_bb_setup(job_id, uid, gid, pool, bb_size, job_script)
	return slurm.SUCCESS
end

-- Stage-in, while the job is pending: hands the job's script to the node, whose Prolog mounts
-- and preloads once the job has one (the cache is on the node, which is not chosen yet).
function slurm_bb_data_in(job_id, job_script)
	if not string.match(job_id, "^%d+$") then
		return slurm.ERROR, "unexpected job id " .. tostring(job_id)
	end
	local dir = job_dir(job_id)
	local status, out = run("umask 077 && mkdir -p " .. quote(dir)
		.. " && rm -f " .. quote(dir) .. "/stage-out.* " .. quote(dir) .. "/setup.err.* "
		.. quote(dir) .. "/mounted.* " .. quote(dir .. "/want")
		.. " && cp " .. quote(job_script) .. " " .. quote(dir .. "/job.sh.tmp")
		.. " && mv -f " .. quote(dir .. "/job.sh.tmp") .. " " .. quote(dir .. "/job.sh"))
	if status ~= 0 then
		return slurm.ERROR, "cannot hand job " .. job_id .. " to its node in " .. dir .. ": " .. out
	end
	return slurm.SUCCESS
end

function slurm_bb_real_size(job_id)
	return slurm.SUCCESS
end

-- Synchronous, when the job is scheduled: the mount point is known before the node makes it.
function slurm_bb_paths(job_id, job_script, path_file)
	local out, err = io.open(path_file, "w")
	if not out then
		return slurm.ERROR, "cannot write " .. path_file .. ": " .. tostring(err)
	end
	out:write("DW_JOB_STRIPED_CACHE=", JOB_ROOT, "/", job_id, "/mnt\n")
	out:close()
	return slurm.SUCCESS
end

function slurm_bb_pre_run(job_id, job_script)
	return slurm.SUCCESS
end

function slurm_bb_post_run(job_id, job_script)
	return slurm.SUCCESS
end

-- Stage-out, after the job ended (failed or not, as Slurm runs it): tells the node's Epilog,
-- which waits for the word, to write back and unmount, and waits, bounded, for its outcome. A
-- failure keeps the job in stage-out with the message in `scontrol show job`
-- (Reason=burst_buffer/lua: ...).
function slurm_bb_data_out(job_id, job_script)
	local dir = job_dir(job_id)
	local ok, err = write_file(dir .. "/want", "stage-out\n")
	if not ok then
		return slurm.ERROR, "cannot ask the node for stage-out in " .. dir .. ": " .. tostring(err)
	end
	return node_outcome(dir, STAGE_OUT_WAIT)
end

-- After stage-out, or instead of it. Slurm hurries a teardown when the job's data is not
-- wanted: it never ran, or `scancel --hurry` skipped its stage-out. The nodes' Epilogs (waiting
-- for the word) are told to discard, and this waits, bounded, for those that mounted. Then the
-- hand-over directory goes. A Prolog still setting up meanwhile (a preload under way) finds the
-- word, or the directory gone, when it ends, and takes its cache down itself (tools/slurm/node.sh).
function slurm_bb_job_teardown(job_id, job_script, hurry)
	if not string.match(job_id, "^%d+$") then
		return slurm.ERROR, "unexpected job id " .. tostring(job_id)
	end
	local dir = job_dir(job_id)
	if hurry == "true" and read_file(dir .. "/job.sh") then
		-- Over a "stage-out" that a hurried stage-out left, in case a node has not read it.
		local ok, err = write_file(dir .. "/want", "discard\n")
		if not ok then
			return slurm.ERROR, "cannot ask the node to discard in " .. dir .. ": " .. tostring(err)
		end
		local rc, msg = node_outcome(dir, TEARDOWN_WAIT)
		if rc ~= slurm.SUCCESS then
			return rc, msg
		end
	end
	local status, out = run("rm -rf " .. quote(dir))
	if status ~= 0 then
		return slurm.ERROR, out
	end
	return slurm.SUCCESS
end

-- scontrol show bbstat
function slurm_bb_get_status(...)
	return slurm.SUCCESS,
		string.format("pliant burst buffer: PLIANT_BIN=%s PLIANT_BB_STATE_DIR=%s PLIANT_JOB_ROOT=%s\n",
			PLIANT, STATE_DIR, JOB_ROOT)
end
