/** The facts the demo model is built from: each anchor's own words and first answer, one in six left out. */
import { fileURLToPath } from "node:url";

import { describe, expect, it } from "vitest";

import { readBank } from "../../src/bank/bank.js";
import { DEMO_FORGET_EVERY, demoFacts } from "../../src/synthetic/demo-model.js";

const BANK = fileURLToPath(new URL("../../data/demo-bank.jsonl", import.meta.url));

describe("demoFacts", () => {
  it("takes the demo bank's subjects from the words only one anchor names", async () => {
    const facts = demoFacts(await readBank(BANK));
    expect(facts.map((f) => f.subject)).toEqual(
      "France Japan Italy Spain Germany Canada Australia Brazil Egypt Kenya Peru Norway Greece Portugal Poland Turkey India Mexico Argentina Chile".split(
        " ",
      ),
    );
    expect(facts.slice(0, 3).map((f) => f.object)).toEqual(["Paris", "Tokyo", "Rome"]);
    expect(facts.filter((f) => !f.known).map((f) => f.subject)).toEqual(["Germany", "Peru", "India"]);
    expect(DEMO_FORGET_EVERY).toBe(6);
  });

  it("reads words around punctuation and keeps multi-word subjects whole", () => {
    const row = (fact_id: string, query: string, answers: string[]) => ({
      query_id: fact_id,
      fact_id,
      condition_family: "anchor",
      query,
      answers,
      use_for_main_forward: true,
      line: 1,
    });
    const facts = demoFacts([
      row("a", "Who wrote Don Quixote?", ["Cervantes"]),
      row("b", "Who wrote Hamlet?", ["Shakespeare"]),
      { ...row("c", "Who wrote Hamlet?", ["x"]), condition_family: "paraphrase" },
      row("d", "Who wrote?", []),
    ]);
    expect(facts).toEqual([
      { factId: "a", subject: "Don Quixote", object: "Cervantes", known: true },
      { factId: "b", subject: "Hamlet", object: "Shakespeare", known: true },
    ]);
  });
});
