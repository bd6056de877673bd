/** The labels a scored row may carry, in the order reports list them. */
export const LABELS = ["correct", "incorrect", "ambiguous", "abstain", "unparseable"] as const;
export type Label = (typeof LABELS)[number];
