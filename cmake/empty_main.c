/* placeholder until src/tools has sources */
int main(void);
int main(void)
{
    return 1;
}
