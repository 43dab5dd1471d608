// Read a claim's last outcome by direct get, as docs/contract.md says ("Things to know"): a
// subscriber may be handed an outcome a moment before the stream has stored it, so a direct get
// right after may answer "not found" or an older outcome. Ask again until the stored outcome is at
// least the one the subscription gave (`seq`), within the caller's own time limit.
export async function lastOutcome(jsm, subject, atLeastSeq = 0) {
  for (;;) {
    try {
      const outcome = (await jsm.direct.getMessage("GPULEDGER_OUTCOMES", { last_by_subj: subject })).json();
      if (outcome.seq >= atLeastSeq) return outcome;
    } catch (err) {
      if (!/no message found|not found/i.test(String(err))) throw err;
    }
    await new Promise(resolve => setTimeout(resolve, 50));
  }
}
