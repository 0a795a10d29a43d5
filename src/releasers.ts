// Acquire → register a releaser; release in reverse order. close() is idempotent and runs every
// step even when one fails, reporting the failures together.
export class Releasers {
  private readonly steps: { name: string; fn: () => unknown }[] = [];
  private closing?: Promise<Error[]>;

  add(name: string, fn: () => unknown): void {
    this.steps.push({ name, fn });
  }

  close(): Promise<Error[]> {
    this.closing ??= (async () => {
      const errors: Error[] = [];
      for (const step of this.steps.reverse()) {
        try {
          await step.fn();
        } catch (err) {
          errors.push(new Error(`${step.name}: ${(err as Error).message}`));
        }
      }
      return errors;
    })();
    return this.closing;
  }
}
