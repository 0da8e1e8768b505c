// Package ec2cloud implements cloud.Cloud over the EC2 API with aws-sdk-go-v2, against any EC2-compatible
// endpoint: fakecloud in tests and kind, a real provider in production. SDK types stay in this package.
//
// # Files
//
// config.go builds the client (New, Options); volumes.go, attach.go, modify.go, snapshots.go and instances.go
// hold the methods; wait.go polls for asynchronous work, estimate.go learns how long it takes and batcher.go
// coalesces those polls; devicenames.go allocates device names per instance; errors.go classifies EC2 errors
// into the cloud package's sentinels; retry.go gives each mutating action its own retryer; metrics.go counts
// every HTTP attempt; convert.go and pagination.go translate to domain types and pages.
//
// # Waiting
//
// Mutating calls return at once and EC2 finishes the work later, so CreateDisk, AttachDisk, DetachDisk,
// ResizeDisk, ModifyDisk and WaitForSnapshot poll until it is done, it fails, or the caller's context ends.
// Each wait polls on a schedule from cenkalti/backoff (WaitOptions: Initial, then growing by Multiplier up to
// Max). A wait that starts while no other is in progress polls at once, so an idle cloud adds no latency.
//
// Transitions of one kind take about as long each time (an EBS attach takes seconds), so the schedule's early
// polls are mostly wasted. Once three waits of a kind have ended, a new one first sleeps through the lower
// quartile of the recent ones' durations (estimate.go), then polls by the schedule; never more than half the
// caller's remaining deadline. A duration is the middle of the bracket in which the wait saw its resource
// finish, between the last look that saw it unfinished and the first that saw it done, whoever made them; a
// wait done at its very first look counts half its time, so an estimate that became too long shrinks. Waits
// that started before anything was known learn as soon as the first of their kind end: a poll their growing
// interval would put past the estimate comes forward to it, so the rest of a burst is not seen half a
// transition late.
//
// The polls of concurrent waits are coalesced by a batcher per resource kind: a wait subscribes to its ID, and
// when any wait wants a fresh look the batcher makes one Describe call (with a volume-id filter, which, unlike
// VolumeIds, does not fail as a whole when one volume is gone) for every subscribed ID, and hands each
// subscriber its record. A call starts as soon as one is wanted and none is in flight; requests arriving
// meanwhile are served by the next call, made as soon as the previous returns, so there is no timer. When a
// wait's poll falls due, a call that observed it within the interval it waited stands for the poll. (Counting
// the next interval from that call, so that the waits one call saw fall due together, was tried: it made more
// calls in a stream of waits, not fewer.) Under load one call serves many waits; 100
// concurrent create → attach → detach → delete cycles need about 4.1 EC2 calls per cycle, of which 4 are the
// mutating calls themselves (test/bench controller). The batcher keeps each volume's latest observation for a
// few seconds (RecentDisk), for a publish that may act on what the cloud just said because the AttachVolume
// that follows answers for itself.
//
// # Idempotency
//
// CreateDisk derives CreateVolume's ClientToken from the CSI name, so a retry after a lost reply gets the same
// disk; when the token answers with a disk being deleted (a name reused), it moves to a token derived from the
// name and that disk's ID. CreateSnapshot has no token: it is idempotent by a name tag, the SDK replays only
// throttled attempts, and after an ambiguous failure the snapshot is looked up before trying again. AttachDisk
// adopts an attachment to the same instance; DetachDisk of a disk not attached there succeeds.
//
// DeleteDisk returns once EC2 has accepted the deletion: the disk is deleting (or gone) and can no longer be
// attached, and EC2 finishes on its own. It does not wait, as the EBS CSI driver does not: the wait would only
// add calls. A disk that fails to create (state error) is deleted before CreateDisk returns ErrFailed.
//
// # Device names
//
// AttachDisk needs a device name free on the instance. The allocator learns an instance's devices once, from
// DescribeInstances (batched: the first attaches to many instances share one call), then keeps them current
// from its own attaches and detaches and from the attachments every batched DescribeVolumes reports; a name
// taken behind its back is found when EC2 answers "already in use" and the attach moves to the next name.
// There is no DescribeInstances per attach: an instance that does not exist is known from AttachVolume's own
// InvalidInstanceID.NotFound.
//
// # Instances that stop or end
//
// Instance state is read only on error paths, never per attach or detach. AttachVolume answers for the target
// instance: InvalidInstanceID.NotFound, or IncorrectInstanceState, after which one DescribeInstances tells a
// terminated or shutting-down instance (ErrInstanceGone, which matches ErrNotFound) from a pending or stopping
// one (ErrIncorrectState). A stopped instance takes attachments, as on EC2. A disk attached to another
// instance gives a cloud.AttachedElsewhereError (ErrInUse) naming that instance and its state, read then. A
// detach from an instance EC2 no longer knows, or that is terminated or shutting down, succeeds: EC2 ends
// those attachments itself (one it is already detaching is waited for); a stopped instance detaches as usual.
//
// # Stuck attachments
//
// An attachment still attaching AttachStuckTimeout after it began (default 90 s, as the EBS CSI driver; 0 is
// off) is detached by force (stuck.go), waited for until it is gone, and made again under a new device name,
// once per AttachDisk or WaitForAttachment call, with an info log naming the volume, instance, device and how
// long it was stuck. A second stuck attachment gives ErrAttachmentStuck and is left as it is: it may yet
// complete. Its age is measured from the cloud's attach time when the attachment was found rather than made,
// so the external-attacher's next call, which finds it attaching, unsticks it at once even when the
// attacher's own timeout (60 s in our manifests) is shorter than the bound; no state is kept between calls.
// A detach refused for an attachment stuck past the bound is made by force. The check rides on the attach
// wait's own polls: no call is added until an attachment is stuck.
//
// # Modifications
//
// ResizeDisk and ModifyDisk go through one queue per volume (modifiers.go): requests that meet while a round
// reads the disk become one ModifyVolume; later ones form the next round, which starts when the previous
// returns, and which waits for the previous modification to complete (EC2 refuses a new one while the last is
// modifying or optimizing) instead of being refused.
//
// # Pacing
//
// EC2 throttles per action and account with token buckets (CreateVolume and DeleteVolume 100 tokens refilled
// at 5/s, AttachVolume and DetachVolume 50 at 5/s, Describe* 100 at 20/s: DefaultRequestLimits), and refuses
// a call that finds its bucket empty (RequestLimitExceeded). A burst of 1,000 volumes can go no faster than
// the attach bucket allows, about 190 s; what the driver can choose is how many refused calls it costs. The
// SDK's adaptive mode, which the driver used to run, cuts its rate on every throttle, random ones included
// (30 % refused calls made 100 cycles take 165 s instead of under a second).
//
// pace.go keeps, per action, a limiter (bucketState): a model of the account's bucket, inside the SDK's retry
// loop, so every attempt passes through it; calls go in their order of arrival (bucket). Its invariants:
//
//   - Model calls. A call that finds a token in the model takes it and goes. The model refills at its rate,
//     never above the limit's PerSecond, and holds at most Burst tokens. A caller whose context ends while it
//     waits leaves the queue; a ticket never sent is given back.
//   - The model starts empty (newBucketState): a driver just started, perhaps after one killed mid-burst,
//     does not know what the bucket holds, and learns it from EC2's answers.
//   - Probes. Unless the action is paced, calls beyond the model go as probes, at most window in flight. The
//     window starts at one and grows by one with each probe EC2 accepts (TCP's slow start) up to 4
//     (maxWindow), so an account with room to spare is not held to the model, a fresh driver reaches full
//     speed in a few round trips, and a bucket that runs dry under a burst refuses few calls at once. An
//     accepted probe takes a token from the model (EC2 had one the model had not).
//   - A refused call empties the model (its token is not given back): EC2 had less than a token.
//   - The rate. A model call EC2 refuses (with no probe out that may have taken its token) shows the bucket
//     refilling slower than the model: another client spends the account's tokens, or the limits given are
//     too high. The model's rate is halved, at most once per token time (cutRate), never below 1/8 of the
//     limit; each accepted call grows it by 1/64, up to the limit (growRate). With a model 5 times the
//     buckets, 200 cycles see 4 to 7 % of their calls refused and none fail (test/bench controller
//     --driver-args). Random refusals cut the rate too; the calls then go as probes.
//   - Paced. Ten refused calls in a row (refusalsToPace) show the bucket empty; random refusals, even of 30 %
//     of all calls, make such a run about once in 170,000 calls. The action is then paced: no probe goes,
//     calls wait for the model's tokens, and the window is back at one. A full model (the action calm for
//     as long as EC2 takes to refill its bucket at the model's rate) ends the paced spell; the rate's floor
//     bounds how long that takes after random refusals cut it.
//   - Polls. While an action is paced, the batchers whose waits follow its calls (pollSpacing: the volumes
//     batcher for CreateVolume, AttachVolume, DetachVolume, DeleteVolume and DescribeVolumes) poll at most
//     once per PaceOptions.PollInterval (1 s): the calls their polls would let go wait for tokens anyway.
//     Other batchers poll as before.
//
// Refusals the model did not foresee (another client, a random fault) are retried after a short jittered
// backoff (RetryOptions.ThrottleBaseDelay, 25 ms, doubling per attempt up to a second): waiting for the
// bucket is the pacer's part. The pacer logs, at the default verbosity, once when EC2 starts throttling an
// action (it becomes paced) and once when it stops; diskforge_cloud_api_pacing_seconds{action} times the waits.
// PaceOptions.Limits takes an account's raised limits (--ec2-request-limits); PaceOptions.Off sends every
// call at once. Under EC2's own buckets, 1,000 cycles take 1.01 times the floor the buckets allow, about 4.3
// calls per cycle; with 30 % of calls refused at random, 100 cycles take 0.4 to 1.5 s, against 0.3 to 0.4 s
// with none refused (test/bench controller, make bench).
//
// # Retries and errors
//
// The SDK's retryer handles throttling and 5xx, in standard mode: each mutating action has its own retryer
// with its own retry budget, so a storm on one action does not starve the others; Describe calls share one.
// Errors are classified by EC2 code into the cloud package's sentinels; the message is read only for "already
// in use" on AttachVolume, which EC2 reports as a plain InvalidParameterValue.
package ec2cloud
