"""Heron's processes: the topology master (supervision, observation, settings), the
stream manager (routing, children), the instance, the schedulers (local, Spark), the
submitter's handle (RunningTopology) and its link to the master."""
